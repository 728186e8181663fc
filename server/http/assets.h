// The dashboard's static files, compiled into the binary from
// server/http/assets/ (see embed_assets.py).
#ifndef LOCKSTEP_SERVER_HTTP_ASSETS_H_
#define LOCKSTEP_SERVER_HTTP_ASSETS_H_

#include <cstddef>
#include <string>

namespace lockstep::server {

struct Asset {
  const char* path;          // "/index.html"
  const char* content_type;  // "text/html; charset=utf-8"
  const unsigned char* data;
  size_t size;
};

// The asset served at `path`, or nullptr.
const Asset* FindAsset(const std::string& path);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_HTTP_ASSETS_H_
