// src/auth: the cryptographic primitives (against RFC 4231 and FIPS 180-2 vectors), API keys and
// their tenants, the cluster secret and loopback addresses, and signatures on internal requests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "auth/api_keys.h"
#include "auth/cluster_secret.h"
#include "auth/crypto.h"
#include "auth/peer_signature.h"

namespace mnemo::auth {
namespace {

std::string hmac_hex(std::string_view key, std::string_view data) { return to_hex(hmac_sha256(key, {data})); }

// --- crypto ---------------------------------------------------------------------------------

TEST(Crypto, HmacSha256Rfc4231Case1) {
  EXPECT_EQ(hmac_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(Crypto, HmacSha256Rfc4231Case2) {
  EXPECT_EQ(hmac_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Crypto, HmacSha256Rfc4231Case3) {
  EXPECT_EQ(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}

TEST(Crypto, HmacSha256Rfc4231Case6KeyLongerThanABlock) {
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Crypto, HmacSha256Rfc4231Case7KeyAndDataLongerThanABlock) {
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'),
                     "This is a test using a larger than block-size key and a larger than block-size data. The key "
                     "needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(Crypto, HmacSha256OfPartsIsHmacOfTheirConcatenation) {
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), {"Hi", "", " The", "re"})),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(Crypto, HmacSha256WithAnEmptyKey) {
  // Python: hmac.new(b"", b"x", hashlib.sha256). An empty key, also one without storage (a
  // default string_view's null data), is a key like any other.
  EXPECT_EQ(hmac_hex("", "x"), "4cbc96099a6467ce002461f10549b4898265ebe6188b45efacc44293516e62c4");
  EXPECT_EQ(hmac_hex(std::string_view(), "x"), "4cbc96099a6467ce002461f10549b4898265ebe6188b45efacc44293516e62c4");
  EXPECT_EQ(hmac_hex(std::string_view(), std::string_view()),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(Crypto, Sha256) {
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Crypto, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("secret-key", "secret-key"));
  EXPECT_FALSE(constant_time_equal("secret-key", "secret-kez"));
  EXPECT_FALSE(constant_time_equal("secret-key", "Secret-key"));
  EXPECT_FALSE(constant_time_equal("secret-key", "secret-ke"));
  EXPECT_FALSE(constant_time_equal("secret-ke", "secret-key"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_FALSE(constant_time_equal("x", ""));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal(std::string_view(), ""));
  EXPECT_TRUE(constant_time_equal(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(Crypto, RandomHex) {
  EXPECT_EQ(random_hex(0), "");
  for (size_t bytes : {1, 8, 16, 32, 100}) {
    const std::string hex = random_hex(bytes);
    ASSERT_EQ(hex.size(), 2 * bytes);
    EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos) << hex;
  }
  EXPECT_NE(random_hex(16), random_hex(16));
  EXPECT_NE(random_u64(), random_u64());
}

// --- API keys -------------------------------------------------------------------------------

ApiKeys keys_of(std::string_view text) {
  auto keys = ApiKeys::from_text(text, "keys.txt");
  EXPECT_TRUE(keys.ok()) << keys.error().message();
  return keys.ok() ? std::move(*keys) : ApiKeys();
}

std::string error_of(std::string_view text) {
  auto keys = ApiKeys::from_text(text, "keys.txt");
  EXPECT_FALSE(keys.ok());
  return keys.ok() ? std::string() : keys.error().message();
}

TEST(ApiKeys, AKeyAloneIsItsOwnTenantNamedAfterItsHash) {
  const std::string key = "sk-0123456789abcdef0123456789abcdef";
  const ApiKeys keys = keys_of(key + "\n");
  ASSERT_EQ(keys.size(), 1u);
  const auto tenant = keys.tenant_of(key);
  ASSERT_TRUE(tenant.has_value());
  ASSERT_EQ(tenant->size(), 4u + 16u) << *tenant;
  EXPECT_EQ(tenant->substr(0, 4), "key-");
  EXPECT_EQ(tenant->find_first_not_of("0123456789abcdef", 4), std::string::npos) << *tenant;
  EXPECT_EQ(tenant->find(key), std::string::npos);
  EXPECT_EQ(*tenant, "key-" + to_hex(sha256(key)).substr(0, 16));
  EXPECT_TRUE(valid_tenant_name(*tenant));
  // The same rule as --api-key.
  EXPECT_EQ(ApiKeys::single(key).tenant_of(key), tenant);
  // Another key, another tenant.
  const ApiKeys other = keys_of("sk-0123456789abcdef0123456789abcdeg");
  EXPECT_NE(other.tenant_of("sk-0123456789abcdef0123456789abcdeg"), tenant);
}

TEST(ApiKeys, TenantKeyLinesCommentsAndBlankLines) {
  const ApiKeys keys = keys_of(
      "# the key file\n"
      "\n"
      "   \t \n"
      "acme sk-acme-1\n"
      "  # an indented comment\n"
      "\tglobex\t sk-globex-1  \r\n"
      "sk-alone\n"
      "  team.a_b-9 sk-team");  // no final newline
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_EQ(keys.tenant_of("sk-acme-1"), "acme");
  EXPECT_EQ(keys.tenant_of("sk-globex-1"), "globex");
  EXPECT_EQ(keys.tenant_of("sk-team"), "team.a_b-9");
  EXPECT_EQ(keys.tenant_of("sk-alone"), "key-" + to_hex(sha256("sk-alone")).substr(0, 16));
  // Comment lines are no keys.
  EXPECT_EQ(keys.tenant_of("#"), std::nullopt);
  EXPECT_EQ(keys.tenant_of("# the key file"), std::nullopt);
}

TEST(ApiKeys, ThreeFieldsIsAnErrorWithTheLineNumber) {
  const std::string message = error_of("# keys\nacme sk-1\n\nacme sk-2 extra\n");
  EXPECT_NE(message.find("keys.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("line 4"), std::string::npos) << message;
}

TEST(ApiKeys, ADuplicateKeyIsAnError) {
  EXPECT_NE(error_of("acme sk-1\nglobex sk-1\n").find("line 2"), std::string::npos);
  EXPECT_NE(error_of("sk-1\nsk-1\n").find("twice"), std::string::npos);
  EXPECT_FALSE(error_of("acme sk-1\nsk-1\n").empty());
}

TEST(ApiKeys, ABadTenantNameIsAnError) {
  EXPECT_NE(error_of("acme sk-1\nac/me sk-2\n").find("line 2"), std::string::npos);
  EXPECT_FALSE(error_of("tenant:1 sk-1\n").empty());
  EXPECT_FALSE(error_of("ténant sk-1\n").empty());
  EXPECT_FALSE(error_of(std::string(65, 't') + " sk-1\n").empty());
  EXPECT_EQ(keys_of(std::string(64, 't') + " sk-1\n").tenant_of("sk-1"), std::string(64, 't'));
}

TEST(ApiKeys, AFileWithoutKeysIsAnError) {
  EXPECT_NE(error_of("").find("no key"), std::string::npos);
  EXPECT_FALSE(error_of("\n\n").empty());
  EXPECT_FALSE(error_of("# only a comment\n").empty());
}

TEST(ApiKeys, FromFile) {
  const auto path = std::filesystem::temp_directory_path() / ("mnemo_api_keys_" + std::to_string(::getpid()));
  std::ofstream(path) << "acme sk-file\n";
  auto keys = ApiKeys::from_file(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(keys.ok()) << keys.error().message();
  EXPECT_EQ(keys->tenant_of("sk-file"), "acme");
  EXPECT_FALSE(ApiKeys::from_file(path.string()).ok());
}

TEST(ApiKeys, TenantOfMatchesTheWholeKeyOnly) {
  const ApiKeys keys = keys_of("acme sk-abcdef\n");
  EXPECT_EQ(keys.tenant_of("sk-abcdef"), "acme");
  EXPECT_EQ(keys.tenant_of("sk-abcde"), std::nullopt);
  EXPECT_EQ(keys.tenant_of("sk-"), std::nullopt);
  EXPECT_EQ(keys.tenant_of("s"), std::nullopt);
  EXPECT_EQ(keys.tenant_of("sk-abcdefg"), std::nullopt);
  EXPECT_EQ(keys.tenant_of(std::string("sk-abcdef\0", 10)), std::nullopt);
  EXPECT_EQ(keys.tenant_of("sk-abcdef "), std::nullopt);
  EXPECT_EQ(keys.tenant_of(" sk-abcdef"), std::nullopt);
  EXPECT_EQ(keys.tenant_of("SK-ABCDEF"), std::nullopt);
  EXPECT_EQ(keys.tenant_of(""), std::nullopt);
  EXPECT_EQ(keys.tenant_of(std::string_view()), std::nullopt);
  EXPECT_EQ(ApiKeys().tenant_of(""), std::nullopt);
  EXPECT_EQ(ApiKeys().tenant_of("sk-abcdef"), std::nullopt);
}

TEST(ApiKeys, TenantOfAuthorizationNeedsBearer) {
  const ApiKeys keys = keys_of("acme sk-abcdef\n");
  EXPECT_EQ(keys.tenant_of_authorization("Bearer sk-abcdef"), "acme");
  EXPECT_EQ(keys.tenant_of_authorization("sk-abcdef"), std::nullopt);
  EXPECT_EQ(keys.tenant_of_authorization("Basic sk-abcdef"), std::nullopt);
  EXPECT_EQ(keys.tenant_of_authorization("Bearer"), std::nullopt);
  EXPECT_EQ(keys.tenant_of_authorization("Bearer "), std::nullopt);
  EXPECT_EQ(keys.tenant_of_authorization("Bearer  sk-abcdef"), std::nullopt);
  EXPECT_EQ(keys.tenant_of_authorization("Bearer sk-abcde"), std::nullopt);
  EXPECT_EQ(keys.tenant_of_authorization("Bearersk-abcdef"), std::nullopt);
  EXPECT_EQ(keys.tenant_of_authorization(""), std::nullopt);
}

TEST(ApiKeys, TwoKeysOfOneTenantBothMapToIt) {
  // Rotation: the new key is added beside the old one, then the old one removed; the tenant
  // (and what it stores) stays.
  const ApiKeys keys = keys_of("acme sk-old\nacme sk-new\nglobex sk-globex\n");
  EXPECT_EQ(keys.tenant_of("sk-old"), "acme");
  EXPECT_EQ(keys.tenant_of("sk-new"), "acme");
  EXPECT_EQ(keys.tenant_of("sk-globex"), "globex");
  EXPECT_EQ(keys_of("acme sk-new\n").tenant_of("sk-new"), "acme");
}

TEST(ApiKeys, Merge) {
  ApiKeys keys = keys_of("acme sk-1\n");
  ASSERT_TRUE(keys.merge(ApiKeys::single("sk-2")).ok());
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.tenant_of("sk-1"), "acme");
  EXPECT_TRUE(keys.tenant_of("sk-2").has_value());
  EXPECT_FALSE(keys.merge(ApiKeys::single("sk-1")).ok());
}

TEST(ApiKeys, ValidTenantName) {
  EXPECT_TRUE(valid_tenant_name("a"));
  EXPECT_TRUE(valid_tenant_name("Team-1.a_b"));
  EXPECT_TRUE(valid_tenant_name(std::string(64, 'x')));
  EXPECT_FALSE(valid_tenant_name(""));
  EXPECT_FALSE(valid_tenant_name(std::string(65, 'x')));
  EXPECT_FALSE(valid_tenant_name("a b"));
  EXPECT_FALSE(valid_tenant_name("a;b"));
  EXPECT_FALSE(valid_tenant_name("a/b"));
  EXPECT_FALSE(valid_tenant_name(std::string("a\0b", 3)));
}

// --- cluster secret and loopback addresses ----------------------------------------------------

class ClusterSecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() / ("mnemo_cluster_secret_" + std::to_string(::getpid()));
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void write(const std::string& text) { std::ofstream(path_, std::ios::binary) << text; }

  std::filesystem::path path_;
};

TEST_F(ClusterSecretTest, TooShortIsRefused) {
  write(std::string(kMinClusterSecretBytes - 1, 's'));
  auto secret = read_cluster_secret(path_.string());
  ASSERT_FALSE(secret.ok());
  EXPECT_NE(secret.error().message().find(std::to_string(kMinClusterSecretBytes)), std::string::npos);
  // Whitespace does not count towards the length.
  write("  " + std::string(kMinClusterSecretBytes - 1, 's') + " \n\n");
  EXPECT_FALSE(read_cluster_secret(path_.string()).ok());
  write(" \t\r\n");
  EXPECT_FALSE(read_cluster_secret(path_.string()).ok());
  write("");
  EXPECT_FALSE(read_cluster_secret(path_.string()).ok());
}

TEST_F(ClusterSecretTest, WhitespaceIsTrimmed) {
  const std::string key(64, 'a');
  write(" \t" + key + "\r\n\n");
  auto secret = read_cluster_secret(path_.string());
  ASSERT_TRUE(secret.ok()) << secret.error().message();
  EXPECT_EQ(*secret, key);
  // Inner whitespace is part of the secret.
  write(std::string(16, 'a') + " " + std::string(16, 'b') + "\n");
  secret = read_cluster_secret(path_.string());
  ASSERT_TRUE(secret.ok()) << secret.error().message();
  EXPECT_EQ(*secret, std::string(16, 'a') + " " + std::string(16, 'b'));
  // Exactly the minimum.
  write(std::string(kMinClusterSecretBytes, 'z'));
  EXPECT_TRUE(read_cluster_secret(path_.string()).ok());
}

TEST_F(ClusterSecretTest, AMissingFileIsAnError) { EXPECT_FALSE(read_cluster_secret(path_.string() + ".missing").ok()); }

TEST(LoopbackHost, HostOf) {
  EXPECT_EQ(host_of("http://127.0.0.1:2379"), "127.0.0.1");
  EXPECT_EQ(host_of("https://127.0.0.1:2379/v3/kv/range"), "127.0.0.1");
  EXPECT_EQ(host_of("localhost:80"), "localhost");
  EXPECT_EQ(host_of("[::1]:8080"), "::1");
  EXPECT_EQ(host_of("http://[::1]:8080/x"), "::1");
  EXPECT_EQ(host_of("::1"), "::1");
  EXPECT_EQ(host_of("127.1.2.3"), "127.1.2.3");
  EXPECT_EQ(host_of("10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(host_of("http://10.0.0.1:2379"), "10.0.0.1");
  EXPECT_EQ(host_of("127.0.0.1.evil.com"), "127.0.0.1.evil.com");
  EXPECT_EQ(host_of("http://127.0.0.1.evil.com:80/"), "127.0.0.1.evil.com");
  EXPECT_EQ(host_of("example.com"), "example.com");
  EXPECT_EQ(host_of("http://user:pass@example.com:80/"), "example.com");
}

TEST(LoopbackHost, HostOfStopsAtTheQueryAndTheFragment) {
  // The authority ends at the first '/', '?' or '#': an '@' after it is no userinfo, so these
  // name evil.com, whatever the text after it says.
  EXPECT_EQ(host_of("http://evil.com#@127.0.0.1"), "evil.com");
  EXPECT_EQ(host_of("http://evil.com?@127.0.0.1:80"), "evil.com");
  EXPECT_EQ(host_of("http://evil.com:80?x=[::1]"), "evil.com");
  EXPECT_FALSE(is_loopback_host(host_of("http://evil.com#@127.0.0.1")));
}

TEST(LoopbackHost, IsLoopbackHost) {
  EXPECT_TRUE(is_loopback_host(host_of("http://127.0.0.1:2379")));
  EXPECT_TRUE(is_loopback_host(host_of("localhost:80")));
  EXPECT_TRUE(is_loopback_host(host_of("[::1]:8080")));
  EXPECT_TRUE(is_loopback_host(host_of("127.1.2.3")));
  EXPECT_FALSE(is_loopback_host(host_of("10.0.0.1")));
  EXPECT_FALSE(is_loopback_host(host_of("127.0.0.1.evil.com")));
  EXPECT_FALSE(is_loopback_host(host_of("example.com")));
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.255.255.255"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_FALSE(is_loopback_host(""));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("::"));
  EXPECT_FALSE(is_loopback_host("128.0.0.1"));
  EXPECT_FALSE(is_loopback_host("1.127.0.0"));
  EXPECT_FALSE(is_loopback_host("localhost.evil.com"));
  EXPECT_FALSE(is_loopback_host("127.0.0.1 "));
}

TEST(LoopbackHost, OnlyRealAddressesCount) {
  // Text that looks like 127.x but is no IPv4 address is a host name the resolver looks up
  // (through the search domains): it may resolve anywhere.
  EXPECT_FALSE(is_loopback_host("127.0.0.256"));
  EXPECT_FALSE(is_loopback_host("127.0.0.1000"));
  EXPECT_FALSE(is_loopback_host("127.0.0.099"));
  EXPECT_FALSE(is_loopback_host("127..0.1"));
  EXPECT_FALSE(is_loopback_host("127.0.0."));
  EXPECT_FALSE(is_loopback_host("127..."));
  EXPECT_FALSE(is_loopback_host("127.0.0.1."));
  EXPECT_FALSE(is_loopback_host("127.0.0"));
  EXPECT_FALSE(is_loopback_host("127"));
  EXPECT_FALSE(is_loopback_host(std::string("127.0.0.1\0.evil.com", 18)));
  EXPECT_FALSE(is_loopback_host(host_of("[::1")));  // unclosed bracket: no address
  EXPECT_FALSE(is_loopback_host(host_of("http://[::1")));
  EXPECT_TRUE(is_loopback_host("0:0:0:0:0:0:0:1"));
  EXPECT_FALSE(is_loopback_host("::2"));
}

// --- peer signatures --------------------------------------------------------------------------

constexpr int64_t kT0 = 1'700'000'000'000;  // unix ms
const std::string kSecret(32, 'S');
const std::string kNonce = "0123456789abcdef0123456789abcdef";

TEST(PeerSignature, VerifiesOnceAndReturnsTheTenant) {
  PeerSigner signer(kSecret);
  PeerVerifier verifier(kSecret);
  const std::string header = signer.sign_at(kT0, kNonce, "POST", "/v1/chat/completions", "acme", "{\"a\":1}");
  EXPECT_EQ(header.substr(0, 3), "v1;");
  auto tenant = verifier.verify_at(kT0, header, "POST", "/v1/chat/completions", "{\"a\":1}");
  ASSERT_TRUE(tenant.ok()) << tenant.error().message();
  EXPECT_EQ(*tenant, "acme");
  // A replay of the same header is refused, even for the same request.
  auto again = verifier.verify_at(kT0 + 1, header, "POST", "/v1/chat/completions", "{\"a\":1}");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message().find("replayed"), std::string::npos) << again.error().message();
}

TEST(PeerSignature, TheEmptyTenant) {
  PeerSigner signer(kSecret);
  PeerVerifier verifier(kSecret);
  const std::string header = signer.sign_at(kT0, kNonce, "GET", "/internal/state", "", "");
  auto tenant = verifier.verify_at(kT0, header, "GET", "/internal/state", "");
  ASSERT_TRUE(tenant.ok()) << tenant.error().message();
  EXPECT_EQ(*tenant, "");
}

TEST(PeerSignature, SignWithTheClockVerifiesWithTheClock) {
  PeerSigner signer(kSecret);
  PeerVerifier verifier(kSecret);
  const std::string a = signer.sign("POST", "/x", "acme", "body");
  const std::string b = signer.sign("POST", "/x", "acme", "body");
  EXPECT_NE(a, b);  // another nonce each time
  EXPECT_TRUE(verifier.verify(a, "POST", "/x", "body").ok());
  EXPECT_TRUE(verifier.verify(b, "POST", "/x", "body").ok());
  EXPECT_FALSE(verifier.verify(a, "POST", "/x", "body").ok());
}

TEST(PeerSignature, AnotherSecretIsRefused) {
  PeerSigner signer(std::string(32, 'A'));
  PeerVerifier verifier(std::string(32, 'B'));
  const std::string header = signer.sign_at(kT0, kNonce, "POST", "/x", "acme", "body");
  auto result = verifier.verify_at(kT0, header, "POST", "/x", "body");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message().find("does not match"), std::string::npos) << result.error().message();
}

TEST(PeerSignature, AChangedRequestIsRefused) {
  PeerSigner signer(kSecret);
  PeerVerifier verifier(kSecret);
  const std::string header = signer.sign_at(kT0, kNonce, "POST", "/v1/responses", "acme", "{\"input\":\"hi\"}");
  EXPECT_FALSE(verifier.verify_at(kT0, header, "PUT", "/v1/responses", "{\"input\":\"hi\"}").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header, "post", "/v1/responses", "{\"input\":\"hi\"}").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header, "POST", "/v1/responses/", "{\"input\":\"hi\"}").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header, "POST", "/v1/chat/completions", "{\"input\":\"hi\"}").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header, "POST", "/v1/responses", "{\"input\":\"ho\"}").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header, "POST", "/v1/responses", "{\"input\":\"hi\"} ").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header, "POST", "/v1/responses", "").ok());

  // Another tenant in the header: the MAC covers it.
  std::string other_tenant = header;
  other_tenant.replace(other_tenant.find(";acme;"), 6, ";globe;");
  EXPECT_FALSE(verifier.verify_at(kT0, other_tenant, "POST", "/v1/responses", "{\"input\":\"hi\"}").ok());
  std::string no_tenant = header;
  no_tenant.replace(no_tenant.find(";acme;"), 6, ";;");
  EXPECT_FALSE(verifier.verify_at(kT0, no_tenant, "POST", "/v1/responses", "{\"input\":\"hi\"}").ok());
  // Another time or nonce in the header: covered too.
  std::string other_time = header;
  other_time.replace(3, std::to_string(kT0).size(), std::to_string(kT0 + 1));
  EXPECT_FALSE(verifier.verify_at(kT0, other_time, "POST", "/v1/responses", "{\"input\":\"hi\"}").ok());
  std::string other_nonce = header;
  other_nonce.replace(other_nonce.find(kNonce), kNonce.size(), std::string(32, 'f'));
  EXPECT_FALSE(verifier.verify_at(kT0, other_nonce, "POST", "/v1/responses", "{\"input\":\"hi\"}").ok());
  // A MAC with one digit changed.
  std::string other_mac = header;
  other_mac.back() = other_mac.back() == '0' ? '1' : '0';
  EXPECT_FALSE(verifier.verify_at(kT0, other_mac, "POST", "/v1/responses", "{\"input\":\"hi\"}").ok());

  // The refusals did not use up the nonce: the genuine request still verifies (once).
  EXPECT_TRUE(verifier.verify_at(kT0, header, "POST", "/v1/responses", "{\"input\":\"hi\"}").ok());
}

TEST(PeerSignature, OutsideTheWindowIsRefused) {
  PeerSigner signer(kSecret);
  PeerVerifier verifier(kSecret, std::chrono::seconds(120));
  const int64_t window = 120'000;
  const auto header_at = [&](int64_t t, char nonce_digit) {
    return signer.sign_at(t, std::string(32, nonce_digit), "POST", "/x", "acme", "b");
  };
  auto stale = verifier.verify_at(kT0, header_at(kT0 - window - 1, '1'), "POST", "/x", "b");
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.error().message().find("window"), std::string::npos) << stale.error().message();
  EXPECT_FALSE(verifier.verify_at(kT0, header_at(kT0 + window + 1, '2'), "POST", "/x", "b").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header_at(0, '3'), "POST", "/x", "b").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header_at(-kT0, '4'), "POST", "/x", "b").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header_at(std::numeric_limits<int64_t>::max(), '5'), "POST", "/x", "b").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header_at(std::numeric_limits<int64_t>::min(), '6'), "POST", "/x", "b").ok());
  // The edges of the window are inside it.
  EXPECT_TRUE(verifier.verify_at(kT0, header_at(kT0 - window, '7'), "POST", "/x", "b").ok());
  EXPECT_TRUE(verifier.verify_at(kT0, header_at(kT0 + window, '8'), "POST", "/x", "b").ok());
  // A shorter window.
  PeerVerifier strict(kSecret, std::chrono::milliseconds(10));
  EXPECT_FALSE(strict.verify_at(kT0, header_at(kT0 - 11, '9'), "POST", "/x", "b").ok());
  EXPECT_TRUE(strict.verify_at(kT0, header_at(kT0 - 10, 'a'), "POST", "/x", "b").ok());
}

TEST(PeerSignature, AReplayLaterInTheWindowIsRefused) {
  PeerSigner signer(kSecret);
  PeerVerifier verifier(kSecret);
  const std::string header = signer.sign_at(kT0, kNonce, "POST", "/x", "acme", "b");
  ASSERT_TRUE(verifier.verify_at(kT0 - 100'000, header, "POST", "/x", "b").ok());
  EXPECT_FALSE(verifier.verify_at(kT0, header, "POST", "/x", "b").ok());
  EXPECT_FALSE(verifier.verify_at(kT0 + 120'000, header, "POST", "/x", "b").ok());
  EXPECT_FALSE(verifier.verify_at(kT0 + 120'001, header, "POST", "/x", "b").ok());  // stale by then
}

TEST(PeerSignature, MalformedHeadersAreRefused) {
  PeerSigner signer(kSecret);
  PeerVerifier verifier(kSecret);
  const std::string good = signer.sign_at(kT0, kNonce, "POST", "/x", "acme", "b");
  const std::string mac = good.substr(good.rfind(';') + 1);
  ASSERT_EQ(mac.size(), 64u);
  const std::string time = std::to_string(kT0);
  const auto refused = [&](const std::string& header) {
    auto result = verifier.verify_at(kT0, header, "POST", "/x", "b");
    if (result.ok()) ADD_FAILURE() << "accepted: " << header;
  };
  refused("");
  refused("v1");
  refused("v1;;;;");
  refused(";;;;;");
  refused("v1;" + time + ";" + kNonce + ";acme;" + mac + ";");              // 6 fields
  refused("v1;" + time + ";" + kNonce + ";acme;extra;" + mac);              // 6 fields
  refused("v1;" + time + ";" + kNonce + ";" + mac);                         // 4 fields
  refused("v2;" + time + ";" + kNonce + ";acme;" + mac);                    // another version
  refused("V1;" + time + ";" + kNonce + ";acme;" + mac);
  refused("v1;" + time + "x;" + kNonce + ";acme;" + mac);                   // time not a number
  refused("v1; " + time + ";" + kNonce + ";acme;" + mac);
  refused("v1;+" + time + ";" + kNonce + ";acme;" + mac);
  refused("v1;99999999999999999999999;" + kNonce + ";acme;" + mac);         // out of int64
  refused("v1;" + time + ";" + kNonce.substr(1) + ";acme;" + mac);          // short nonce
  refused("v1;" + time + ";" + kNonce + "0;acme;" + mac);                   // long nonce
  refused("v1;" + time + ";" + std::string(32, 'g') + ";acme;" + mac);      // non-hex nonce
  refused("v1;" + time + ";" + std::string(32, 'A') + ";acme;" + mac);      // upper-case nonce
  refused("v1;" + time + ";" + kNonce + ";acme;" + std::string(64, 'g'));   // non-hex MAC
  refused("v1;" + time + ";" + kNonce + ";acme;" + std::string(64, 'z'));
  refused("v1;" + time + ";" + kNonce + ";acme;" + mac.substr(1));          // short MAC
  refused("v1;" + time + ";" + kNonce + ";acme;" + mac + "0");              // long MAC
  std::string upper = mac;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper != mac) refused("v1;" + time + ";" + kNonce + ";acme;" + upper);  // upper-case MAC
  refused("v1;" + time + ";" + kNonce + ";ac me;" + mac);                   // bad tenant characters
  refused("v1;" + time + ";" + kNonce + ";ac/me;" + mac);
  refused("v1;" + time + ";" + kNonce + ";ac\nme;" + mac);
  refused("v1;" + time + ";" + kNonce + ";" + std::string(65, 'a') + ";" + mac);
  refused(std::string(100'000, ';'));
  // Signed with a tenant a verifier cannot accept: refused as malformed, whatever the MAC.
  const std::string bad_tenant = signer.sign_at(kT0, std::string(32, 'c'), "POST", "/x", "ac me", "b");
  refused(bad_tenant);
  // None of that used the good header's nonce.
  EXPECT_TRUE(verifier.verify_at(kT0, good, "POST", "/x", "b").ok());
}

}  // namespace
}  // namespace mnemo::auth
