// Compiled schemas, regexes and GBNF grammars kept by their source text, so that a schema or
// tool set sent with every request (an agent's) is compiled once. Least recently used first out; thread-safe (the
// server's handler threads share it). Only compilations that succeed are kept.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "util/result.h"

namespace mnemo::grammar {

template <class T>
class CompileCache {
 public:
  explicit CompileCache(size_t capacity) : capacity_(capacity) {}

  Result<std::shared_ptr<const T>> get(const std::string& key, const std::function<Result<T>()>& compile) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = index_.find(key); it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        ++hits_;
        return it->second->second;
      }
    }
    Result<T> compiled = compile();  // outside the lock: compiling may take a while
    if (!compiled.ok()) return compiled.error();
    auto value = std::make_shared<const T>(std::move(*compiled));
    std::lock_guard lock(mutex_);
    if (index_.find(key) == index_.end()) {
      order_.emplace_front(key, value);
      index_[key] = order_.begin();
      if (order_.size() > capacity_) {
        index_.erase(order_.back().first);
        order_.pop_back();
      }
    }
    return std::shared_ptr<const T>(value);
  }

  size_t hits() const {
    std::lock_guard lock(mutex_);
    return hits_;
  }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const T>>;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;
  std::unordered_map<std::string, typename std::list<Entry>::iterator> index_;
  size_t hits_ = 0;
};

// The process's caches (256 entries each).
CompileCache<CompiledSchema>& schema_cache();
CompileCache<Regex>& regex_cache();
CompileCache<Gbnf>& gbnf_cache();

}  // namespace mnemo::grammar
