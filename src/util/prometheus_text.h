// Prometheus text exposition (format 0.0.4), shared by every /metrics of the project (instances
// and router). Names are given without the "mnemo_" prefix, which is added here.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace mnemo::prometheus {

inline void header(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  out += fmt::format("# HELP mnemo_{0} {1}\n# TYPE mnemo_{0} {2}\n", name, help, type);
}

template <class T>
void counter(std::string& out, std::string_view name, std::string_view help, T value) {
  header(out, name, help, "counter");
  out += fmt::format("mnemo_{} {}\n", name, value);
}

template <class T>
void gauge(std::string& out, std::string_view name, std::string_view help, T value) {
  header(out, name, help, "gauge");
  out += fmt::format("mnemo_{} {}\n", name, value);
}

// One sample per instance: name{instance="id"} value.
template <class Map>
void per_instance(std::string& out, std::string_view name, std::string_view help, std::string_view type,
                  const Map& values) {
  header(out, name, help, type);
  for (const auto& [id, value] : values) out += fmt::format("mnemo_{}{{instance=\"{}\"}} {}\n", name, id, value);
}

}  // namespace mnemo::prometheus
