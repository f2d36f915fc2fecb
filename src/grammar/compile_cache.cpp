#include "grammar/compile_cache.h"

namespace mnemo::grammar {

CompileCache<CompiledSchema>& schema_cache() {
  static CompileCache<CompiledSchema> cache(256);
  return cache;
}

CompileCache<Regex>& regex_cache() {
  static CompileCache<Regex> cache(256);
  return cache;
}

CompileCache<Gbnf>& gbnf_cache() {
  static CompileCache<Gbnf> cache(256);
  return cache;
}

}  // namespace mnemo::grammar
