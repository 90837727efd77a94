// A fixture for the tests of `accord serve`'s slots (prefix_reuse_test.cpp,
// serve_shared_prefix_test.cpp): a service over slots on the stories model,
// in process, and requests to it as a client sends them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/serve/metrics.hpp"
#include "runtime/serve/prefix_store.hpp"
#include "runtime/serve/scheduler.hpp"
#include "runtime/serve/service.hpp"
#include "tests/serve_responder.hpp"
#include "tests/support.hpp"

namespace accord::test {

inline DistributedOptions three_ranks() {
  DistributedOptions options;
  options.ranks = 3;
  return options;
}

class ServeSlotsTest : public ::testing::Test {
 protected:
  using json = nlohmann::json;

  struct Server {
    serve::Metrics metrics;
    std::unique_ptr<serve::Scheduler> scheduler;
    std::unique_ptr<serve::Service> service;
  };

  // A service over `slots` slots, single-rank or of three ranks each, which
  // keep their tokens or not. With `kv_pool`, single-rank slots take their
  // keys and values from it; with `store`, they keep their prompts in it.
  std::unique_ptr<Server> start(int slots, serve::SlotReuse reuse, bool ranks = false,
                                std::shared_ptr<KvPool> kv_pool = nullptr,
                                std::shared_ptr<serve::PrefixStore> store = nullptr) {
    std::vector<std::unique_ptr<serve::SlotSession>> sessions;
    StageOptions stage;
    stage.kv_pool = kv_pool;
    for (int i = 0; i < slots; ++i) {
      if (ranks) {
        sessions.push_back(std::make_unique<DistributedSlot>(model_, three_ranks()));
      } else {
        sessions.push_back(std::make_unique<serve::SessionSlot>(model_, pool_, nullptr, PhaseTimer{}, stage));
      }
    }
    auto server = std::make_unique<Server>();
    if (store) server->metrics.set_prefix_store_source([store] { return store->counts(); });
    const serve::KvRoom room{kv_pool, kv_position_bytes(model_.config(), KvType::f32)};
    server->scheduler = std::make_unique<serve::Scheduler>(tokenizer_, std::move(sessions), 8, serve::LoadSink{},
                                                           WarningSink{}, reuse, room, std::move(store));
    serve::ServiceOptions options;
    options.model_id = "stories260K";
    options.context = model_.config().seq_len;
    server->service = std::make_unique<serve::Service>(tokenizer_, *server->scheduler, server->metrics, options);
    return server;
  }
  static std::shared_ptr<RecordingResponder> send(Server& server, const std::string& path, const json& body) {
    auto responder = std::make_shared<RecordingResponder>();
    server.service->handle({"POST", path, body.dump(), "", ""}, responder);
    return responder;
  }
  static json post(Server& server, const std::string& path, const json& body) {
    const serve::HttpResponse response = send(server, path, body)->wait();
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }
  // A stream's events, once it ended.
  static std::vector<std::string> streamed(Server& server, const json& body) {
    auto responder = send(server, "/v1/completions", body);
    responder->wait();
    return responder->events();
  }
  static int cached(const json& reply) { return reply["usage"]["prompt_tokens_details"]["cached_tokens"]; }
  // What one block of positions takes in a KV pool.
  std::uint64_t block_bytes() const {
    return KvCache::kBlockPositions * kv_position_bytes(model_.config(), KvType::f32);
  }

  const Model model_ = load_stories_model();
  const Tokenizer tokenizer_ = load_stories_tokenizer();
  cpu::ThreadPool pool_{2};
};

}  // namespace accord::test
