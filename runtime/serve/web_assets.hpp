// The chat and status pages of `accord serve` (runtime/serve/web/): its files, compiled
// into the binary by cmake/embed_files.cmake, so that the page needs no
// file, network or build step at run time. The Service answers GET / and
// each file's path with them, without the API key (the data the page asks
// for needs it, as the API does).
#pragma once

#include <span>
#include <string_view>

namespace accord::serve {

// One file of the page; every view points into the binary's own data.
struct WebAsset {
  std::string_view path;          // where it is served: "/index.html", "/chat.js", ...
  std::string_view content_type;  // from its extension
  std::string_view etag;          // quoted, from its SHA-256
  std::string_view body;
};

// Every file, in the order runtime/CMakeLists.txt lists them.
std::span<const WebAsset> web_assets();

// The file served at `path` ("/" is "/index.html", "/status" "/status.html"), or nullptr.
const WebAsset* find_web_asset(std::string_view path);

}  // namespace accord::serve
