// The one host:port parser every client uses: what it accepts, and that each refusal says why.
#include <gtest/gtest.h>

#include "util/net_address.h"

namespace mnemo::testing {
namespace {

TEST(ParseAuthority, HostsPortsAndBracketedIpv6) {
  auto a = parse_authority("127.0.0.1:8080");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  auto v6 = parse_authority("[::1]:9");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9);
  EXPECT_EQ(parse_authority("example.com", 80)->port, 80);
}

TEST(ParseAuthority, RefusesWhatIsNotHostColonPort) {
  for (const char* bad : {"", ":80", "host", "host:", "host:0", "host:65536", "host:12ab", "[::1]", "[::1:80", "::1:80",
                          "a@b:80", "a/b:80", "[::1]x80"}) {
    const auto parsed = parse_authority(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.error().message().find(bad), std::string::npos) << parsed.error().message();
  }
  EXPECT_TRUE(parse_authority("[::1]", 80).ok());  // a default port fills a bracketed host too
}

TEST(ParseHttpUrl, SchemePathAndAuthority) {
  auto url = parse_http_url("https://[::1]:2379/v3/kv");
  ASSERT_TRUE(url.ok());
  EXPECT_TRUE(url->tls);
  EXPECT_EQ(url->address.host, "::1");
  EXPECT_EQ(url->authority, "[::1]:2379");
  EXPECT_EQ(url->path, "/v3/kv");
  EXPECT_FALSE(parse_http_url("127.0.0.1:80").ok());  // a scheme is required unless told otherwise
  auto bare = parse_http_url("127.0.0.1:80", std::nullopt, /*bare_is_http=*/true);
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->tls);
  EXPECT_FALSE(parse_http_url("ftp://h:80", std::nullopt, true).ok());
  // The authority ends at the path: an '@' or ':' after it is not part of the host.
  EXPECT_FALSE(parse_http_url("http://a/b:2379").ok());
  EXPECT_EQ(parse_http_url("http://h/x", 80)->path, "/x");
}

}  // namespace
}  // namespace mnemo::testing
