// The translation unit the shared precompiled headers are built for (cmake/Pch.cmake).
int mnemo_pch_anchor() { return 0; }
