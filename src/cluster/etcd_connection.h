// One HTTP(S) connection to etcd's gateway as an EtcdEndpoint describes it (internal to
// src/cluster: the unary calls and the watch stream share it).
#pragma once

#include <memory>
#include <string>

#include <httplib.h>

#include "cluster/etcd_client.h"

namespace mnemo::cluster::wire {

// The client of one call (or one watch stream), TLS set up when the URL is https.
inline std::unique_ptr<httplib::Client> etcd_connection(const EtcdEndpoint& endpoint) {
  std::string url = endpoint.url;
  if (!url.empty() && url.back() == '/') url.pop_back();
  auto client = endpoint.cert_file.empty() ? std::make_unique<httplib::Client>(url)
                                           : std::make_unique<httplib::Client>(url, endpoint.cert_file, endpoint.key_file);
  if (url.rfind("https://", 0) == 0) {
    client->enable_server_certificate_verification(true);
    if (!endpoint.ca_file.empty()) client->set_ca_cert_path(endpoint.ca_file);
  }
  return client;
}

// etcd's words for a token it no longer takes (expired, or etcd restarted).
inline bool is_stale_token_error(const std::string& message) {
  return message.find("invalid auth token") != std::string::npos || message.find("user name is empty") != std::string::npos;
}

}  // namespace mnemo::cluster::wire
