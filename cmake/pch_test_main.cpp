// The executable the tests' shared precompiled header is built for (cmake/Pch.cmake).
int main() { return 0; }
