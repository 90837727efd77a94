// accord serve without sockets: the request format and its errors, stop
// sequences, chat templates, metrics, and the service over real sessions
// with a responder that records what a client would receive.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/serve/chat_template.hpp"
#include "runtime/serve/metrics.hpp"
#include "runtime/serve/openai_api.hpp"
#include "runtime/serve/progress.hpp"
#include "runtime/serve/scheduler.hpp"
#include "runtime/serve/service.hpp"
#include "runtime/serve/status_feed.hpp"
#include "runtime/serve/stop_filter.hpp"
#include "runtime/serve/watched_slot.hpp"
#include "runtime/serve/web_assets.hpp"
#include "tests/serve_responder.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using nlohmann::json;
using serve::Endpoint;
using test::RecordingResponder;

serve::ApiError parse_error(std::string_view body, Endpoint endpoint = Endpoint::completions) {
  auto parsed = serve::parse_request(body, endpoint);
  EXPECT_FALSE(parsed) << body;
  return parsed ? serve::ApiError{} : parsed.error();
}

TEST(ServeRequest, CompletionDefaultsAreOpenAIs) {
  auto request = serve::parse_request(R"({"model":"m","prompt":"Once"})", Endpoint::completions);
  ASSERT_TRUE(request) << request.error().message;
  EXPECT_EQ(request->prompt, "Once");
  EXPECT_EQ(request->max_tokens, 16);
  EXPECT_EQ(request->temperature, 1.0f);
  EXPECT_EQ(request->top_p, 1.0f);
  EXPECT_FALSE(request->seed);
  EXPECT_FALSE(request->stream);
  auto chat =
      serve::parse_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", Endpoint::chat_completions);
  ASSERT_TRUE(chat);
  EXPECT_FALSE(chat->max_tokens);  // the rest of the context
}

TEST(ServeRequest, EveryParameterIsRead) {
  auto request = serve::parse_request(
      R"({"model":"m","prompt":["p"],"max_tokens":5,"temperature":0,"top_p":0.5,"seed":-1,"stop":["a","b"],
          "stream":true,"stream_options":{"include_usage":true},"echo":true})",
      Endpoint::completions);
  ASSERT_TRUE(request) << request.error().message;
  EXPECT_EQ(request->prompt, "p");
  EXPECT_EQ(request->max_tokens, 5);
  EXPECT_EQ(request->temperature, 0.0f);
  EXPECT_EQ(request->top_p, 0.5f);
  EXPECT_FALSE(request->seed);  // -1: a random seed, as llama-server takes it
  EXPECT_EQ(request->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(request->stream);
  EXPECT_TRUE(request->include_usage);
  EXPECT_TRUE(request->echo);
}

TEST(ServeRequest, BadInputNamesTheField) {
  EXPECT_EQ(parse_error("{not json").message, "the request body is not valid JSON");
  EXPECT_EQ(parse_error("[1]").message, "the request body must be a JSON object, got an array");
  EXPECT_EQ(parse_error(R"({"prompt":"p"})").param, "model");
  EXPECT_EQ(parse_error(R"({"model":"m"})").param, "prompt");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":3})").message, "'prompt' must be a string, got 3");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","max_tokens":"5"})").param, "max_tokens");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","max_tokens":0})").message,
            "'max_tokens' must be at least 1, got 0");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","max_tokens":-3})").param, "max_tokens");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","temperature":3})").param, "temperature");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","top_p":0})").param, "top_p");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","stop":["a","b","c","d","e"]})").param, "stop");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","stop":[1]})").param, "stop");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","stream":"yes"})").param, "stream");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","n":0})").param, "n");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","n":2,"stream":true})").code, "unsupported_value");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":["a","b"]})").code, "unsupported_value");
  EXPECT_EQ(parse_error(R"({"model":"m","messages":[]})", Endpoint::chat_completions).param, "messages");
  EXPECT_EQ(
      parse_error(R"({"model":"m","messages":[{"role":"robot","content":"x"}]})", Endpoint::chat_completions).param,
      "messages[0].role");
  EXPECT_EQ(parse_error(R"({"model":"m","messages":[{"role":"user","content":5}]})", Endpoint::chat_completions).param,
            "messages[0].content");
}

// Every message prints the number the client sent, never one wrapped into
// another type's range.
TEST(ServeRequest, MessagesPrintTheNumbersSent) {
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","max_tokens":-9223372036854775808})").message,
            "'max_tokens' must be at least 1, got -9223372036854775808");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","max_tokens":1.5})").message,
            "'max_tokens' must be an integer, got 1.5");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","seed":-2})").message,
            "'seed' must be between 0 and 18446744073709551615, or -1 for a random seed, got -2");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","seed":18446744073709551616})").message,
            "'seed' must be an integer, got 1.8446744073709552e+19");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","n":17})").message, "'n' must be between 1 and 16, got 17");
  // Past int64 and past the context: as many tokens as the context holds.
  for (const char* huge : {"9223372036854775808", "18446744073709551615"}) {
    auto request = serve::parse_request(std::string(R"({"model":"m","prompt":"p","max_tokens":)") + huge + "}",
                                        Endpoint::completions);
    ASSERT_TRUE(request) << request.error().message;
    EXPECT_EQ(request->max_tokens, std::numeric_limits<int>::max());
  }
  auto seeded =
      serve::parse_request(R"({"model":"m","prompt":"p","seed":18446744073709551615})", Endpoint::completions);
  ASSERT_TRUE(seeded);
  EXPECT_EQ(seeded->seed, ~std::uint64_t{0});
}

TEST(ServeRequest, LogprobsAreReadAsEachEndpointSpellsThem) {
  EXPECT_EQ(serve::parse_request(R"({"model":"m","prompt":"p"})", Endpoint::completions)->top_logprobs, -1);
  EXPECT_EQ(serve::parse_request(R"({"model":"m","prompt":"p","logprobs":0})", Endpoint::completions)->top_logprobs, 0);
  EXPECT_EQ(serve::parse_request(R"({"model":"m","prompt":"p","logprobs":20})", Endpoint::completions)->top_logprobs,
            20);
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","logprobs":21})").message,
            "'logprobs' must be between 0 and 20, got 21");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"p","logprobs":-1})").param, "logprobs");
  const std::string chat = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  EXPECT_EQ(serve::parse_request(chat + R"("logprobs":true})", Endpoint::chat_completions)->top_logprobs, 0);
  EXPECT_EQ(
      serve::parse_request(chat + R"("logprobs":true,"top_logprobs":5})", Endpoint::chat_completions)->top_logprobs, 5);
  EXPECT_EQ(serve::parse_request(chat + R"("logprobs":false})", Endpoint::chat_completions)->top_logprobs, -1);
  EXPECT_EQ(parse_error(chat + R"("top_logprobs":3})", Endpoint::chat_completions).message,
            "'top_logprobs' needs 'logprobs': true");
  EXPECT_EQ(parse_error(chat + R"("logprobs":true,"top_logprobs":30})", Endpoint::chat_completions).param,
            "top_logprobs");
}

// What a request asks of a parameter accord does not implement is refused,
// naming it; the neutral values OpenAI clients send are taken.
TEST(ServeRequest, UnsupportedParametersAreRefusedWhenTheyAskForSomething) {
  auto neutral = serve::parse_request(
      R"({"model":"m","prompt":"p","presence_penalty":0,"frequency_penalty":0,"logit_bias":{},"user":"u",
          "logprobs":null,"suffix":"","n":1,"best_of":1})",
      Endpoint::completions);
  ASSERT_TRUE(neutral) << neutral.error().message;
  auto chat = serve::parse_request(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":false,"top_logprobs":0,"tools":[],
          "response_format":{"type":"text"}})",
      Endpoint::chat_completions);
  ASSERT_TRUE(chat) << chat.error().message;
  const std::vector<std::pair<std::string, std::string>> asking = {
      {R"("presence_penalty":0.5)", "presence_penalty"},
      {R"("frequency_penalty":-1)", "frequency_penalty"},
      {R"("logit_bias":{"50256":-100})", "logit_bias"},
      {R"("suffix":"end")", "suffix"},
      {R"("best_of":2)", "best_of"},
  };
  for (const auto& [field, name] : asking) {
    const serve::ApiError error = parse_error(R"({"model":"m","prompt":"p",)" + field + "}");
    EXPECT_EQ(error.param, name) << field;
    EXPECT_EQ(error.code, "unsupported_value") << field;
    EXPECT_NE(error.message.find("'" + name + "'"), std::string::npos) << error.message;
  }
  const std::string messages = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  EXPECT_EQ(parse_error(messages + R"("tools":[{"type":"function"}]})", Endpoint::chat_completions).param, "tools");
  EXPECT_EQ(parse_error(messages + R"("response_format":{"type":"json_object"}})", Endpoint::chat_completions).param,
            "response_format");
}

TEST(ServeRequest, ChatContentPartsAreJoined) {
  auto request = serve::parse_request(
      R"({"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})",
      Endpoint::chat_completions);
  ASSERT_TRUE(request) << request.error().message;
  ASSERT_EQ(request->messages.size(), 1u);
  EXPECT_EQ(request->messages[0].role, "system");
  EXPECT_EQ(request->messages[0].content, "ab");
}

TEST(ServeRequest, ErrorsHaveOpenAIsShape) {
  const json body = json::parse(serve::bad_request("bad", "max_tokens").body());
  EXPECT_EQ(body["error"]["message"], "bad");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "max_tokens");
  EXPECT_TRUE(body["error"]["code"].is_null());
}

TEST(ServeStopFilter, HoldsWhatMayBeginAStopAndCutsBeforeIt) {
  serve::StopFilter filter({"THE END"});
  EXPECT_EQ(filter.push("once upon TH"), "once upon ");
  EXPECT_EQ(filter.push("ere"), "THere");  // not the stop after all
  EXPECT_EQ(filter.push(" was THE E"), " was ");
  EXPECT_FALSE(filter.stopped());
  EXPECT_EQ(filter.push("ND and more"), "");
  EXPECT_TRUE(filter.stopped());
  EXPECT_EQ(filter.push("later"), "");
  EXPECT_EQ(filter.flush(), "");
}

TEST(ServeStopFilter, FlushGivesWhatWasHeld) {
  serve::StopFilter filter({"\nUser:"});
  EXPECT_EQ(filter.push("fine.\nUs"), "fine.");
  EXPECT_EQ(filter.flush(), "\nUs");
}

TEST(ServeStopFilter, HoldsAnUnfinishedUtf8Character) {
  serve::StopFilter filter({});
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(filter.push("a" + euro.substr(0, 2)), "a");
  EXPECT_EQ(filter.push(euro.substr(2)), euro);
}

TEST(ServeChatTemplate, AGgufWithoutATemplateHasNone) {
  auto jinja = serve::gguf_chat_template((test::shared_dir() / "models" / "stories260K.gguf").string());
  ASSERT_TRUE(jinja) << jinja.error().message();
  EXPECT_EQ(*jinja, "");
  EXPECT_FALSE(serve::gguf_chat_template("/no/such/model.gguf"));
}

TEST(ServeMetrics, PrometheusTextCountsAndCumulates) {
  serve::Metrics metrics;
  metrics.count_request("/v1/completions", 200);
  metrics.count_request("/v1/completions", 200);
  metrics.count_request("/v1/completions", 429);
  metrics.count_generation({5, 7, 7, 2, 2, 0, false, 0.003, 4});
  metrics.observe_decode_step(0.0007);
  metrics.observe_decode_step(20.0);
  const std::string text = metrics.prometheus_text();
  EXPECT_NE(text.find("accord_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("accord_requests_total{endpoint=\"/v1/completions\",status=\"429\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_generated_tokens_total 7\n"), std::string::npos);
  EXPECT_NE(text.find("accord_aborted_steps_total 2\n"), std::string::npos);
  EXPECT_NE(text.find("accord_decode_step_seconds_bucket{le=\"0.0005\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("accord_decode_step_seconds_bucket{le=\"0.001\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_decode_step_seconds_bucket{le=\"10\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_decode_step_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("accord_prefill_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_prompt_cache_tokens_total 4\n"), std::string::npos);
  EXPECT_EQ(text.find("accord_phase_seconds"), std::string::npos);  // no phase timed yet
  EXPECT_EQ(text.find("accord_batches_total"), std::string::npos);  // no batcher
}

TEST(ServeMetrics, PhasesAndBatchesAreReported) {
  serve::Metrics metrics;
  metrics.observe_phase("Execution", 0.02);
  metrics.observe_phase("Commit", 0.000004);
  metrics.set_batch_source([] { return serve::BatchCounts{3, 10, 4}; });
  const std::string text = metrics.prometheus_text();
  EXPECT_NE(text.find("accord_phase_seconds_bucket{phase=\"Commit\",le=\"1e-05\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("accord_phase_seconds_bucket{phase=\"Execution\",le=\"0.01\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("accord_phase_seconds_bucket{phase=\"Execution\",le=\"0.025\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_batches_total 3\n"), std::string::npos);
  EXPECT_NE(text.find("accord_batched_steps_total 10\n"), std::string::npos);
  EXPECT_NE(text.find("accord_batch_widest 4\n"), std::string::npos);
}

// Two ranks of one slot, the second lost: what /metrics and the status
// feed say of them, from one snapshot.
TEST(ServeMetrics, RanksExpertsAndHealsAreReported) {
  serve::Metrics metrics;
  const auto watch = metrics.watch_slot();
  watch->set_ranks({{"", 0, 3, 4096, 512, {3, 0, 5}}, {"", 3, 2, 2048, 256, {1, 7, 0}}});
  watch->begin_request();
  watch->end_step(nullptr, 1);
  watch->end_step(nullptr, 1);
  const Error aborted(ErrorCode::mechanism, "injected");
  watch->end_step(&aborted, 0);
  const Error lost = Error::poisoned({"rank 1 is down", 1, "Execution", 4});
  watch->end_step(&lost, 0);
  std::string text = metrics.prometheus_text();
  EXPECT_NE(text.find("accord_rank_state{slot=\"0\",rank=\"1\",state=\"poisoned\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("accord_rank_state{slot=\"0\",rank=\"1\",state=\"ready\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("accord_rank_weights_bytes{slot=\"0\",rank=\"0\"} 4096\n"), std::string::npos);
  EXPECT_NE(text.find("accord_rank_weights_bytes{slot=\"0\",rank=\"1\"} 2048\n"), std::string::npos);
  EXPECT_NE(text.find("accord_rank_kv_bytes{slot=\"0\",rank=\"1\"} 256\n"), std::string::npos);
  EXPECT_NE(text.find("accord_expert_rows_total{slot=\"0\",rank=\"0\",expert=\"2\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("accord_expert_rows_total{slot=\"0\",rank=\"1\",expert=\"1\"} 7\n"), std::string::npos);
  EXPECT_NE(text.find("accord_slot_steps_total{slot=\"0\",outcome=\"committed\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("accord_slot_steps_total{slot=\"0\",outcome=\"aborted\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_slot_steps_total{slot=\"0\",outcome=\"poisoned\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_slot_sampled_tokens_total{slot=\"0\"} 2\n"), std::string::npos);

  watch->begin_heal();
  EXPECT_EQ(watch->figures().state, serve::RankState::healing);
  watch->end_heal(HealReport{true, 1, 2, 0}, 0.25);
  EXPECT_EQ(watch->figures().state, serve::RankState::computing);  // its request goes on
  const auto changes = watch->figures().changes;
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].state, serve::RankState::poisoned);
  EXPECT_EQ(changes[0].lost_rank, 1u);
  EXPECT_EQ(changes[0].cause, "rank 1 is down");
  EXPECT_EQ(changes[1].state, serve::RankState::healing);
  EXPECT_EQ(changes[2].state, serve::RankState::computing);
  EXPECT_FALSE(changes[2].lost_rank);
  text = metrics.prometheus_text();
  EXPECT_NE(text.find("accord_heal_attempts_total{result=\"healed\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("accord_rank_state{slot=\"0\",rank=\"0\",state=\"computing\"} 1\n"), std::string::npos);

  const json status = json::parse(serve::status_json(metrics.snapshot(), "m"));
  ASSERT_EQ(status["slots"].size(), 1u);
  ASSERT_EQ(status["slots"][0]["ranks"].size(), 2u);
  EXPECT_EQ(status["slots"][0]["ranks"][1]["first_layer"], 3);
  EXPECT_EQ(status["slots"][0]["ranks"][0]["expert_rows"], json({3, 0, 5}));
  EXPECT_EQ(status["slots"][0]["sampled_tokens"], 2);
  ASSERT_EQ(status["heals"]["recent"].size(), 1u);
  EXPECT_EQ(status["heals"]["recent"][0]["rank"], 1);
  EXPECT_EQ(status["heals"]["recent"][0]["cause"], "rank 1 is down");
  EXPECT_EQ(status["heals"]["recent"][0]["replayed_tokens"], 2);
  EXPECT_EQ(status["slots"][0]["changes"][0]["state"], "poisoned");
}

// A reset that fails leaves the slot as unusable as a poisoned one; one
// that succeeds makes it ready.
TEST(ServeMetrics, AFailedResetShowsTheSlotPoisoned) {
  serve::Metrics metrics;
  const auto watch = metrics.watch_slot();
  watch->reset(Error(ErrorCode::mechanism, "node 127.0.0.1:9 does not answer"));
  EXPECT_EQ(watch->figures().state, serve::RankState::poisoned);
  EXPECT_EQ(watch->figures().changes.back().cause, "reset failed: node 127.0.0.1:9 does not answer");
  watch->reset({});
  EXPECT_EQ(watch->figures().state, serve::RankState::ready);
  EXPECT_EQ(metrics.prometheus_text().find("accord_rank_state{"), std::string::npos);  // it told no ranks
}

TEST(ServeMetrics, NoSlotWatchedWritesNoRankSeries) {
  serve::Metrics metrics;
  EXPECT_EQ(metrics.prometheus_text().find("accord_rank_state"), std::string::npos);
}

TEST(ServeSlots, AWatchedSingleRankSlotReportsItsRank) {
  const Model model = test::load_stories_model();
  cpu::ThreadPool pool(1);
  serve::Metrics metrics;
  serve::WatchedSlot slot(std::make_unique<serve::SessionSlot>(model, pool), metrics.watch_slot());
  const std::vector<int> prompt = {1, 403, 407};
  ASSERT_TRUE(slot.target().prefill(prompt));
  slot.begin_request();
  slot.end_request();
  const serve::SlotFigures figures = metrics.snapshot().slot_figures.at(0);
  EXPECT_EQ(figures.state, serve::RankState::ready);
  EXPECT_EQ(figures.committed_steps, 1u);
  ASSERT_EQ(figures.ranks.size(), 1u);
  EXPECT_EQ(figures.ranks[0].layers, model.config().n_layers);
  EXPECT_GT(figures.ranks[0].weights_bytes, 0u);
  EXPECT_GT(figures.ranks[0].kv_bytes, 0u);
  EXPECT_TRUE(figures.ranks[0].expert_rows.empty());  // a dense model
}

TEST(ServeSlots, ASingleRankSlotTimesEveryPhaseItRuns) {
  const Model model = test::load_stories_model();
  cpu::ThreadPool pool(1);
  std::map<std::string, int> timed;
  serve::SessionSlot slot(model, pool, nullptr, [&](const PhaseId& phase, double seconds) {
    EXPECT_GE(seconds, 0.0);
    ++timed[to_string(phase.phase)];
  });
  const std::vector<int> prompt = {1, 403, 407};
  ASSERT_TRUE(slot.target().prefill(prompt));
  EXPECT_EQ(timed["Execution"], 1);
  EXPECT_EQ(timed["Commit"], 1);
}

// What a client receives: a whole answer, or a stream's events.
// A slot that holds its request, before its generation, until released.
class HeldSlot final : public serve::SlotSession {
 public:
  HeldSlot(const Model& model, cpu::ThreadPool& pool) : inner_(model, pool) {}
  GenerationTarget& target() override { return inner_.target(); }
  Status reset() override { return inner_.reset(); }
  void begin_request() override {
    std::unique_lock lock(mutex_);
    held_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
  }
  // Until the slot took its request.
  void wait_until_held() {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(changed_.wait_for(lock, std::chrono::minutes(2), [&] { return held_; }));
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  serve::SessionSlot inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  bool open_ = false;
};

class ServeServiceTest : public ::testing::Test {
 protected:
  void start(int slots, int queue_limit = 8, const std::vector<Fault>& faults = {}) {
    std::vector<std::unique_ptr<serve::SlotSession>> sessions;
    for (int i = 0; i < slots; ++i) {
      if (faults.empty()) {
        sessions.push_back(std::make_unique<serve::SessionSlot>(model_, pool_));
      } else {
        DistributedOptions options;
        options.ranks = 2;
        options.threads = 1;
        options.faults = faults;
        sessions.push_back(std::make_unique<test::DistributedSlot>(model_, options));
      }
    }
    start_with(std::move(sessions), queue_limit);
  }
  // One slot that holds its first request until released.
  HeldSlot& start_held() {
    auto held = std::make_unique<HeldSlot>(model_, pool_);
    HeldSlot& slot = *held;
    std::vector<std::unique_ptr<serve::SlotSession>> sessions;
    sessions.push_back(std::move(held));
    start_with(std::move(sessions));
    return slot;
  }
  void start_with(std::vector<std::unique_ptr<serve::SlotSession>> sessions, int queue_limit = 8) {
    scheduler_ = std::make_unique<serve::Scheduler>(tokenizer_, std::move(sessions), queue_limit);
    options_.model_id = "stories260K";
    options_.context = model_.config().seq_len;
    service_ = std::make_unique<serve::Service>(tokenizer_, *scheduler_, metrics_, options_);
  }

  std::shared_ptr<RecordingResponder> post(const std::string& path, const json& body,
                                           const std::string& authorization = "") {
    auto responder = std::make_shared<RecordingResponder>();
    service_->handle({"POST", path, body.dump(), authorization, ""}, responder);
    return responder;
  }
  serve::HttpResponse get(const std::string& path, const std::string& authorization = "",
                          const std::string& if_none_match = "") {
    auto responder = std::make_shared<RecordingResponder>();
    service_->handle({"GET", path, "", authorization, if_none_match}, responder);
    return responder->wait();
  }

  // The text `accord generate` gives greedily after `prompt`.
  std::string generated(const std::string& prompt, int max_tokens) {
    cpu::ThreadPool pool(1);
    Session session(model_, pool);
    GenerationOptions options;
    options.max_tokens = max_tokens;
    options.sampler.temperature = 0;
    std::string text;
    options.emit_prompt = false;
    auto result = generate(session, tokenizer_, prompt, options, [&](std::string_view piece) { text += piece; });
    EXPECT_TRUE(result);
    return text;
  }

  const Model model_ = test::load_stories_model();
  const Tokenizer tokenizer_ = test::load_stories_tokenizer();
  cpu::ThreadPool pool_{2};  // the slots share it, as accord serve's do
  serve::Metrics metrics_;
  serve::ServiceOptions options_;  // start() fills in the model
  std::unique_ptr<serve::Scheduler> scheduler_;
  std::unique_ptr<serve::Service> service_;
};

// The text of a stream's events, and its finish reason.
std::pair<std::string, std::string> streamed(const std::vector<std::string>& events) {
  std::string text;
  std::string finish;
  EXPECT_FALSE(events.empty());
  for (const std::string& event : events) {
    if (event == serve::kStreamDone) continue;
    const json chunk = json::parse(event.substr(std::string_view("data: ").size()));
    if (chunk.contains("error")) {
      finish = "error: " + chunk["error"]["message"].get<std::string>();
      continue;
    }
    const json& choice = chunk["choices"][0];
    text += choice.value("text", "");
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  if (!events.empty()) {
    EXPECT_EQ(events.back(), serve::kStreamDone);
  }
  return {text, finish};
}

TEST_F(ServeServiceTest, GreedyCompletionIsGenerates) {
  start(1);
  const json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  const serve::HttpResponse response = post("/v1/completions", body)->wait();
  ASSERT_EQ(response.status, 200) << response.body;
  const json reply = json::parse(response.body);
  EXPECT_EQ(reply["choices"][0]["text"], generated("Once upon a time", 24));
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(reply["usage"]["completion_tokens"], 24);
  EXPECT_EQ(reply["usage"]["prompt_tokens"], 5);
}

TEST_F(ServeServiceTest, AStreamCarriesTheSameText) {
  start(1);
  json body = {{"model", "stories260K"},
               {"prompt", "Once upon a time"},
               {"max_tokens", 24},
               {"temperature", 0},
               {"stream", true}};
  auto responder = post("/v1/completions", body);
  EXPECT_EQ(responder->wait().content_type, "text/event-stream");
  const auto [text, finish] = streamed(responder->events());
  EXPECT_EQ(text, generated("Once upon a time", 24));
  EXPECT_EQ(finish, "length");
}

TEST_F(ServeServiceTest, AStopSequenceEndsTheReplyBeforeIt) {
  start(1);
  const std::string whole = generated("Once upon a time", 24);
  const std::string stop = "Lily";
  ASSERT_NE(whole.find(stop), std::string::npos) << whole;
  const json body = {
      {"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}, {"stop", stop}};
  const json reply = json::parse(post("/v1/completions", body)->wait().body);
  EXPECT_EQ(reply["choices"][0]["text"], whole.substr(0, whole.find(stop)));
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(reply["usage"]["completion_tokens"].get<int>(), 24);  // generation stopped there
}

TEST_F(ServeServiceTest, ConcurrentSequencesDoNotChangeEachOthersTokens) {
  start(2);
  const std::vector<std::string> prompts = {"Once upon a time", "The cat"};
  std::vector<std::shared_ptr<RecordingResponder>> responders;
  for (int round = 0; round < 2; ++round) {
    for (const std::string& prompt : prompts) {
      responders.push_back(post(
          "/v1/completions", {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 30}, {"temperature", 0}}));
    }
  }
  for (std::size_t i = 0; i < responders.size(); ++i) {
    const json reply = json::parse(responders[i]->wait().body);
    EXPECT_EQ(reply["choices"][0]["text"], generated(prompts[i % 2], 30)) << i;
  }
}

TEST_F(ServeServiceTest, AFullQueueAnswers429) {
  start(1, /*queue_limit=*/0);
  const serve::HttpResponse response = post("/v1/completions", {{"model", "stories260K"}, {"prompt", "Once"}})->wait();
  EXPECT_EQ(response.status, 429);
  EXPECT_EQ(json::parse(response.body)["error"]["type"], "rate_limit_exceeded");
}

TEST_F(ServeServiceTest, AClientThatGoesAwayStopsItsGeneration) {
  start(1);
  auto responder = std::make_shared<RecordingResponder>();
  responder->go_after(3);
  service_->handle(
      {"POST", "/v1/completions",
       json{{"model", "stories260K"}, {"prompt", "Once"}, {"max_tokens", 200}, {"stream", true}}.dump(), "", ""},
      responder);
  responder->wait();
  EXPECT_LE(responder->events().size(), 4u);
  // The slot serves the next request, after it counted the first.
  const json reply = json::parse(
      post("/v1/completions", {{"model", "stories260K"}, {"prompt", "Once"}, {"max_tokens", 5}, {"temperature", 0}})
          ->wait()
          .body);
  EXPECT_EQ(reply["choices"][0]["text"], generated("Once", 5));
  EXPECT_NE(metrics_.prometheus_text().find("status=\"499\"} 1\n"), std::string::npos);
}

// `accord serve` shuts down in the order its objects were made: the Service goes first, then the Scheduler stops
// its running jobs after their step. A running job's last step and its answer must not need the Service.
TEST_F(ServeServiceTest, AShutdownMayEndTheServiceBeforeItsRunningJob) {
  start(1);
  auto responder =
      post("/v1/completions", {{"model", "stories260K"}, {"prompt", "Once"}, {"max_tokens", 400}, {"stream", true}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (responder->events().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(responder->events().empty()) << "the generation never started";
  service_.reset();
  scheduler_.reset();
  const auto [text, finish] = streamed(responder->events());
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(finish, "error: " + std::string(serve::kShutdownCutMessage));
  EXPECT_EQ(responder->wait().content_type, "text/event-stream");
  EXPECT_NE(metrics_.prometheus_text().find("accord_requests_total{endpoint=\"/v1/completions\""), std::string::npos);
}

// A prompt of more bytes than the context's tokens could hold is refused
// before it is queued (a queue of none would answer 429) and tokenized.
TEST_F(ServeServiceTest, APromptOfMoreBytesThanTheContextHoldsIsRefusedBeforeQueueing) {
  start(1, /*queue_limit=*/0);
  const std::size_t most = static_cast<std::size_t>(model_.config().seq_len) * tokenizer_.longest_piece_bytes();
  const serve::HttpResponse response =
      post("/v1/completions", {{"model", "stories260K"}, {"prompt", std::string(most + 1, 'a')}})->wait();
  EXPECT_EQ(response.status, 400);
  const json error = json::parse(response.body)["error"];
  EXPECT_EQ(error["code"], "context_length_exceeded");
  EXPECT_EQ(error["param"], "prompt");
}

// Tokens are counted on the slot, not on the thread that hands the request
// in (the server's one I/O thread): a prompt past the context in tokens is
// answered only once its slot takes it, with the context's error.
TEST_F(ServeServiceTest, TheSlotTokenizesAndRefusesAPromptPastTheContext) {
  HeldSlot& slot = start_held();
  std::string prompt;
  for (int i = 0; i < model_.config().seq_len; ++i) prompt += " a";
  ASSERT_LE(prompt.size(), static_cast<std::size_t>(model_.config().seq_len) * tokenizer_.longest_piece_bytes());
  auto responder = post("/v1/completions", {{"model", "stories260K"}, {"prompt", prompt}});
  EXPECT_EQ(get("/health").status, 200);  // the caller is free meanwhile
  EXPECT_FALSE(responder->answered());
  slot.release();
  const serve::HttpResponse response = responder->wait();
  EXPECT_EQ(response.status, 400);
  const json error = json::parse(response.body)["error"];
  EXPECT_EQ(error["code"], "context_length_exceeded");
  EXPECT_NE(error["message"].get<std::string>().find("past the model's context of 512 tokens"), std::string::npos);
}

// A shutdown answers queued and new completions 503 and lets the running one
// finish; stop_running then cuts what still runs.
TEST_F(ServeServiceTest, AShutdownAnswersTheQueue503AndLetsTheRunningFinish) {
  HeldSlot& slot = start_held();
  const json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}};
  auto running = post("/v1/completions", body);
  slot.wait_until_held();
  auto queued = post("/v1/completions", body);
  service_->shut_down();
  EXPECT_EQ(queued->wait().status, 503);
  EXPECT_EQ(json::parse(queued->wait().body)["error"]["message"], serve::kShutdownMessage);
  EXPECT_EQ(post("/v1/completions", body)->wait().status, 503);
  EXPECT_EQ(get("/ready").status, 503);
  EXPECT_EQ(get("/health").status, 200);
  slot.release();
  const serve::HttpResponse finished = running->wait();
  ASSERT_EQ(finished.status, 200) << finished.body;
  EXPECT_EQ(json::parse(finished.body)["choices"][0]["text"], generated("Once upon a time", 12));
}

TEST_F(ServeServiceTest, StopRunningCutsAWholeAnswerWith503) {
  HeldSlot& slot = start_held();
  auto running = post("/v1/completions", {{"model", "stories260K"}, {"prompt", "Once"}, {"max_tokens", 400}});
  slot.wait_until_held();
  service_->shut_down();
  service_->stop_running();
  slot.release();
  const serve::HttpResponse cut = running->wait();
  EXPECT_EQ(cut.status, 503) << cut.body;
  EXPECT_EQ(json::parse(cut.body)["error"]["message"], serve::kShutdownCutMessage);
}

// With a key, every endpoint but /health and /ready asks for it, as OpenAI
// does: Bearer, compared whole.
TEST_F(ServeServiceTest, AnApiKeyGuardsAllButHealthAndReady) {
  options_.api_key = "s3cret-key";
  start(1);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/ready").status, 200);
  for (const std::string& authorization :
       {std::string(), std::string("Bearer s3cret"), std::string("Bearer s3cret-key2"), std::string("Basic s3cret-key"),
        std::string("s3cret-key")}) {
    const serve::HttpResponse refused = get("/v1/models", authorization);
    EXPECT_EQ(refused.status, 401) << authorization;
    EXPECT_EQ(json::parse(refused.body)["error"]["code"], "invalid_api_key");
    EXPECT_EQ(refused.headers, "WWW-Authenticate: Bearer\r\n");
    EXPECT_EQ(get("/metrics", authorization).status, 401);
    EXPECT_EQ(post("/v1/completions", {{"model", "stories260K"}, {"prompt", "Once"}}, authorization)->wait().status,
              401);
  }
  EXPECT_EQ(get("/v1/models", "Bearer s3cret-key").status, 200);
  EXPECT_EQ(get("/v1/models", "bearer s3cret-key").status, 200);  // the scheme in any case
  EXPECT_EQ(get("/metrics", "Bearer s3cret-key").status, 200);
  const serve::HttpResponse done =
      post("/v1/completions", {{"model", "stories260K"}, {"prompt", "Once"}, {"max_tokens", 3}}, "Bearer s3cret-key")
          ->wait();
  EXPECT_EQ(done.status, 200) << done.body;
  EXPECT_NE(metrics_.prometheus_text().find("endpoint=\"/v1/completions\",status=\"401\""), std::string::npos);
}

TEST_F(ServeServiceTest, MetricsMayBePublicBehindAKey) {
  options_.api_key = "k";
  options_.metrics_public = true;
  start(1);
  EXPECT_EQ(get("/metrics").status, 200);
  EXPECT_EQ(get("/v1/models").status, 401);
}

TEST_F(ServeServiceTest, StatusEventsAskForTheKeyAndStreamTheSnapshot) {
  options_.api_key = "k";
  options_.metrics_public = true;  // the status feed asks for the key all the same
  start(1);
  EXPECT_EQ(get("/status/events").status, 401);
  auto responder = std::make_shared<RecordingResponder>();
  service_->handle({"GET", "/status/events", "", "Bearer k", ""}, responder);
  ASSERT_FALSE(responder->events().empty());
  const std::string first = responder->events().front();
  ASSERT_EQ(first.rfind("data: ", 0), 0u);
  const json status = json::parse(first.substr(6));
  EXPECT_EQ(status["model"], "stories260K");
  EXPECT_EQ(status["load"]["slots"], 0);  // set_load is the command's
  // Later snapshots follow each period; a shutdown ends the stream.
  for (int i = 0; i < 100 && responder->events().size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(responder->events().size(), 2u);
  service_->shut_down();
  EXPECT_TRUE(responder->answered());
}

// A rank lost mid-request: the slot heals, and the status feed tells the
// heal, naming the rank, at once.
TEST_F(ServeServiceTest, AHealShowsOnTheStatusFeed) {
  DistributedOptions options;
  options.ranks = 2;
  options.threads = 1;
  options.faults = {*parse_fault("1:Execution:exit:2")};
  std::vector<std::unique_ptr<serve::SlotSession>> sessions;
  sessions.push_back(std::make_unique<serve::WatchedSlot>(std::make_unique<test::DistributedSlot>(model_, options),
                                                          metrics_.watch_slot()));
  start_with(std::move(sessions));
  auto feed = std::make_shared<RecordingResponder>();
  service_->handle({"GET", "/status/events", "", "", ""}, feed);
  const json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
  const json reply = json::parse(post("/v1/completions", body)->wait().body);
  EXPECT_EQ(reply["choices"][0]["text"], generated("Once upon a time", 8));
  const std::string text = metrics_.prometheus_text();
  EXPECT_NE(text.find("accord_heal_attempts_total{result=\"healed\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("accord_slot_steps_total{slot=\"0\",outcome=\"poisoned\"} 1\n"), std::string::npos);
  bool told = false;
  for (int i = 0; i < 100 && !told; ++i) {
    for (const std::string& event : feed->events()) {
      const json status = json::parse(event.substr(6));
      const json& heals = status["heals"]["recent"];
      told = told || (heals.size() == 1 && heals[0]["rank"] == 1 && heals[0]["healed"] == true);
    }
    if (!told) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(told);
}

TEST_F(ServeServiceTest, AbortedStepsAreRetriedAndTheTextIsUnchanged) {
  start(1, 8, {*parse_fault("1:Execution:error:3")});
  const json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}};
  const json reply = json::parse(post("/v1/completions", body)->wait().body);
  EXPECT_EQ(reply["choices"][0]["text"], generated("Once upon a time", 12));
  EXPECT_NE(metrics_.prometheus_text().find("accord_retries_total 1\n"), std::string::npos);
}

TEST_F(ServeServiceTest, ChatUsesTheTemplateAndStreamsARoleFirst) {
  start(1);
  auto responder = post("/v1/chat/completions", {{"model", "stories260K"},
                                                 {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                                 {"max_tokens", 6},
                                                 {"temperature", 0},
                                                 {"stream", true}});
  responder->wait();
  const auto events = responder->events();
  ASSERT_GE(events.size(), 3u);
  const json first = json::parse(events[0].substr(6));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (std::size_t i = 1; i + 1 < events.size(); ++i) {
    text += json::parse(events[i].substr(6))["choices"][0]["delta"].value("content", "");
  }
  const std::string whole = generated("User: Hi\nAssistant:", 6);
  EXPECT_EQ(text, whole.substr(0, whole.find("\nUser:")));
}

// Log-probabilities as OpenAI's completions give them: with echo the
// prompt's tokens (after BOS) before the completion's, whose texts make the
// reply's text at their offsets; streamed, the same tokens come with the
// chunks that carry their text.
TEST_F(ServeServiceTest, CompletionsGiveTheLogprobsOfThePromptAndTheCompletion) {
  start(1);
  json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"},
               {"max_tokens", 8},        {"temperature", 0},
               {"logprobs", 2},          {"echo", true}};
  const serve::HttpResponse response = post("/v1/completions", body)->wait();
  ASSERT_EQ(response.status, 200) << response.body;
  const json choice = json::parse(response.body)["choices"][0];
  const json& logprobs = choice["logprobs"];
  const json& tokens = logprobs["tokens"];
  ASSERT_EQ(tokens.size(), 4u + 8u);
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(logprobs["text_offset"][i], text.size()) << i;
    text += tokens[i].get<std::string>();
    const json& top = logprobs["top_logprobs"][i];
    ASSERT_FALSE(top.empty());
    EXPECT_LE(top.size(), 2u);  // two, or one where both alternatives read the same
    float likeliest = -1e30f;
    for (const auto& [piece, logprob] : top.items()) likeliest = std::max(likeliest, logprob.get<float>());
    EXPECT_LE(logprobs["token_logprobs"][i].get<float>(), likeliest);
    // Greedy: each completion token is its step's likeliest.
    if (i >= 4) {
      EXPECT_FLOAT_EQ(logprobs["token_logprobs"][i].get<float>(), likeliest) << i;
    }
  }
  EXPECT_EQ(text, choice["text"]);

  body["stream"] = true;
  auto streamed_reply = post("/v1/completions", body);
  streamed_reply->wait();
  json chunked = json::array();
  for (const std::string& event : streamed_reply->events()) {
    if (event == serve::kStreamDone) continue;
    const json chunk = json::parse(event.substr(6))["choices"][0];
    if (chunk["logprobs"].is_null()) continue;
    for (const json& token : chunk["logprobs"]["tokens"]) chunked.push_back(token);
  }
  EXPECT_EQ(chunked, tokens);
}

// The same log-probabilities on two ranks as on one, an aborted step
// retried included: the output owner's logits are the single rank's.
TEST_F(ServeServiceTest, LogprobsAreTheSameOnTwoRanks) {
  const json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"},
                     {"max_tokens", 8},        {"temperature", 0},
                     {"logprobs", 3},          {"echo", true}};
  start(1);
  const serve::HttpResponse alone = post("/v1/completions", body)->wait();
  ASSERT_EQ(alone.status, 200) << alone.body;
  start(1, 8, {*parse_fault("1:Execution:error:3")});
  const serve::HttpResponse ranks = post("/v1/completions", body)->wait();
  ASSERT_EQ(ranks.status, 200) << ranks.body;
  const json a = json::parse(alone.body)["choices"][0];
  const json b = json::parse(ranks.body)["choices"][0];
  EXPECT_EQ(a["text"], b["text"]);
  EXPECT_EQ(a["logprobs"]["tokens"], b["logprobs"]["tokens"]);
  ASSERT_EQ(a["logprobs"]["token_logprobs"].size(), b["logprobs"]["token_logprobs"].size());
  for (std::size_t i = 0; i < a["logprobs"]["token_logprobs"].size(); ++i) {
    EXPECT_FLOAT_EQ(a["logprobs"]["token_logprobs"][i].get<float>(), b["logprobs"]["token_logprobs"][i].get<float>())
        << i;
  }
  EXPECT_NE(metrics_.prometheus_text().find("accord_retries_total 1\n"), std::string::npos);
}

TEST_F(ServeServiceTest, ChatGivesEachTokensLogprobWithItsAlternatives) {
  start(1);
  const json body = {{"model", "stories260K"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"max_tokens", 6},        {"temperature", 0},
                     {"logprobs", true},       {"top_logprobs", 3}};
  const serve::HttpResponse response = post("/v1/chat/completions", body)->wait();
  ASSERT_EQ(response.status, 200) << response.body;
  const json reply = json::parse(response.body);
  const json& content = reply["choices"][0]["logprobs"]["content"];
  EXPECT_EQ(content.size(), reply["usage"]["completion_tokens"].get<std::size_t>());
  for (const json& token : content) {
    ASSERT_EQ(token["top_logprobs"].size(), 3u);
    EXPECT_FLOAT_EQ(token["logprob"].get<float>(), token["top_logprobs"][0]["logprob"].get<float>());
    const std::string piece = token["token"];
    EXPECT_EQ(token["bytes"], json(std::vector<int>(piece.begin(), piece.end())));
  }
  const json plain = json::parse(post("/v1/chat/completions", {{"model", "stories260K"},
                                                               {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                                               {"max_tokens", 6},
                                                               {"temperature", 0}})
                                     ->wait()
                                     .body);
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(plain["choices"][0]["message"], reply["choices"][0]["message"]);  // the same reply
}

TEST_F(ServeServiceTest, OtherEndpointsAnswer) {
  start(1);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/ready").status, 200);
  const json models = json::parse(get("/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "stories260K");
  EXPECT_EQ(models["data"][0]["max_model_len"], options_.context);
  EXPECT_EQ(get("/metrics").content_type, "text/plain; version=0.0.4");
  EXPECT_EQ(get("/nowhere").status, 404);
  EXPECT_EQ(get("/v1/completions").status, 405);
  EXPECT_EQ(post("/v1/completions", {{"model", "other"}, {"prompt", "x"}})->wait().status, 404);
}

// The chat page's files are compiled in and open without the key; the
// model's data behind them is not.
TEST_F(ServeServiceTest, TheChatPageIsServedWithoutTheKey) {
  options_.api_key = "s3cret-key";
  start(1);
  const serve::HttpResponse page = get("/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<script type=\"module\" src=\"chat.js\">"), std::string::npos);
  EXPECT_NE(page.headers.find("Content-Security-Policy: default-src 'self'"), std::string::npos);
  EXPECT_EQ(get("/index.html").body, page.body);
  EXPECT_EQ(get("/chat.js").content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(get("/chat.css").content_type, "text/css; charset=utf-8");
  EXPECT_EQ(get("/v1/models").status, 401);
  EXPECT_EQ(get("/nowhere.js").status, 401);  // not a file of the page: behind the key, as any path
  EXPECT_EQ(post("/", {{"model", "stories260K"}})->wait().status, 401);
  std::size_t first_paint_bytes = 0;
  for (const serve::WebAsset& asset : serve::web_assets()) first_paint_bytes += asset.body.size();
  EXPECT_LT(first_paint_bytes, 100u * 1000);
}

// The status page too; its feed needs the key (StatusEventsAskForTheKey...).
TEST_F(ServeServiceTest, TheStatusPageIsServedWithoutTheKey) {
  options_.api_key = "s3cret-key";
  start(1);
  const serve::HttpResponse page = get("/status");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<script type=\"module\" src=\"status.js\">"), std::string::npos);
  EXPECT_EQ(get("/status.html").body, page.body);
  EXPECT_EQ(get("/status.js").status, 200);
  EXPECT_EQ(get("/status.css").status, 200);
  EXPECT_EQ(get("/api.js").content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(get("/status/events").status, 401);
}

TEST_F(ServeServiceTest, TheChatPageIsNotSentAgainToAClientThatHoldsIt) {
  start(1);
  const serve::HttpResponse script = get("/chat.js");
  const std::size_t at = script.headers.find("ETag: \"");
  ASSERT_NE(at, std::string::npos) << script.headers;
  const std::string etag = script.headers.substr(at + 6, script.headers.find("\r\n", at) - at - 6);
  const serve::HttpResponse again = get("/chat.js", "", etag);
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(get("/chat.js", "", "\"other\"").status, 200);
  EXPECT_EQ(get("/nowhere.js").status, 404);
}

TEST(ServeProgress, LinesSayWhatIsDoneOfWhat) {
  EXPECT_EQ(serve::load_progress_line("m.gguf", 51'200'000, 114'000'000), "loading m.gguf: 44% (51.2 of 114.0 MB)");
  EXPECT_EQ(serve::load_progress_line("empty.bin", 0, 0), "loading empty.bin: 100% (0.0 of 0.0 MB)");
  EXPECT_EQ(serve::prefill_progress_line(512, 6, 12), "prefill, 512 tokens: layer 6 of 12");
}

TEST(ServeProgress, RedrawsOneLineInPlaceAndClearsIt) {
  std::string screen;
  serve::TerminalProgress progress([&](std::string_view text) { screen += text; }, std::chrono::hours(1));
  progress.clear();  // nothing shown yet: nothing to clear
  EXPECT_EQ(screen, "");
  progress.show("a");
  progress.show("b");        // within the interval: skipped
  progress.show("c", true);  // the last state: always drawn
  progress.clear();
  EXPECT_EQ(screen, "\r\033[Ka\r\033[Kc\r\033[K");
}

TEST(ServeProgress, LongBatchesTellTheirProgressUnitByUnit) {
  const Model model = test::load_stories_model();
  cpu::ThreadPool pool(1);
  StepBatcher batcher(model, pool);
  std::vector<StepBatcher::Progress> told;
  batcher.set_progress([&](const StepBatcher::Progress& at) { told.push_back(at); });
  Session session(model, pool);
  session.batch_steps_with(&batcher);
  std::vector<int> prompt(StepBatcher::kLongBatchRows, 300);
  prompt[0] = 1;
  ASSERT_TRUE(session.prefill(prompt));
  ASSERT_TRUE(session.decode(5));  // short: tells nothing
  const int units = model.config().n_layers;
  ASSERT_EQ(told.size(), static_cast<std::size_t>(units));
  for (int i = 0; i < units; ++i) {
    EXPECT_EQ(told[static_cast<std::size_t>(i)].rows, StepBatcher::kLongBatchRows);
    EXPECT_EQ(told[static_cast<std::size_t>(i)].units_done, i + 1);
    EXPECT_EQ(told[static_cast<std::size_t>(i)].units, units);
  }
}

}  // namespace
}  // namespace accord
