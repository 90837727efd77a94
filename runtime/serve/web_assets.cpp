#include "runtime/serve/web_assets.hpp"

namespace accord::serve {

const WebAsset* find_web_asset(std::string_view path) {
  if (path == "/") path = "/index.html";
  if (path == "/status") path = "/status.html";
  for (const WebAsset& asset : web_assets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

}  // namespace accord::serve
