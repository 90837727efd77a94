#include "runtime/serve/status_feed.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "runtime/serve/service.hpp"

namespace accord::serve {

namespace {

using nlohmann::json;

json optional_rank(const std::optional<std::uint32_t>& rank) { return rank ? json(*rank) : json(nullptr); }

json ranks_json(const SlotFigures& slot) {
  json ranks = json::array();
  for (std::size_t r = 0; r < slot.ranks.size(); ++r) {
    const RankFigures& rank = slot.ranks[r];
    ranks.push_back({{"rank", r},
                     {"node", rank.node},
                     {"state", to_string(slot.state)},
                     {"lost", slot.lost_rank && *slot.lost_rank == r},
                     {"first_layer", rank.first_layer},
                     {"layers", rank.layers},
                     {"weights_bytes", rank.weights_bytes},
                     {"kv_bytes", rank.kv_bytes},
                     {"expert_rows", rank.expert_rows}});
  }
  return ranks;
}

json changes_json(const SlotFigures& slot) {
  json changes = json::array();
  for (const StateChange& change : slot.changes) {
    changes.push_back({{"state", to_string(change.state)},
                       {"lost_rank", optional_rank(change.lost_rank)},
                       {"cause", change.cause},
                       {"unix_ms", change.unix_ms}});
  }
  return changes;
}

json slots_json(const std::vector<SlotFigures>& slots) {
  json out = json::array();
  for (const SlotFigures& slot : slots) {
    out.push_back({{"state", to_string(slot.state)},
                   {"lost_rank", optional_rank(slot.lost_rank)},
                   {"committed_steps", slot.committed_steps},
                   {"aborted_steps", slot.aborted_steps},
                   {"poisoned_steps", slot.poisoned_steps},
                   {"sampled_tokens", slot.sampled_tokens},
                   {"ranks", ranks_json(slot)},
                   {"changes", changes_json(slot)}});
  }
  return out;
}

json heals_json(const MetricsSnapshot& s) {
  json recent = json::array();
  for (const HealRecord& heal : s.heals) {
    recent.push_back({{"slot", heal.slot},
                      {"rank", optional_rank(heal.rank)},
                      {"cause", heal.cause},
                      {"healed", heal.healed},
                      {"replaced_ranks", heal.replaced_ranks},
                      {"replayed_tokens", heal.replayed_tokens},
                      {"seconds", heal.seconds},
                      {"unix_ms", heal.unix_ms}});
  }
  return {{"healed", s.heals_healed}, {"failed", s.heals_failed}, {"recent", recent}};
}

json sources_json(const MetricsSnapshot& s) {
  json out = {{"batches", nullptr}, {"kv_pool", nullptr}, {"prefix_store", nullptr}};
  if (s.batches)
    out["batches"] = {{"batches", s.batches->batches}, {"steps", s.batches->steps}, {"widest", s.batches->widest}};
  if (s.kv_pool) out["kv_pool"] = {{"used_bytes", s.kv_pool->used_bytes}, {"budget_bytes", s.kv_pool->budget_bytes}};
  if (s.prefix_store) {
    out["prefix_store"] = {{"entries", s.prefix_store->entries},
                           {"bytes", s.prefix_store->bytes},
                           {"lookups", s.prefix_store->lookups},
                           {"hits", s.prefix_store->hits}};
  }
  return out;
}

}  // namespace

std::string status_json(const MetricsSnapshot& s, const std::string& model_id) {
  const GenerationTotals& t = s.totals;
  json out = sources_json(s);
  out["model"] = model_id;
  out["uptime_s"] = s.uptime_seconds;
  out["unix_ms"] = s.unix_ms;
  out["load"] = {{"queued", s.queued}, {"active", s.active}, {"slots", s.slots}};
  out["totals"] = {{"prompt_tokens", t.prompt_tokens},
                   {"generated_tokens", t.generated_tokens},
                   {"steps", t.steps},
                   {"aborted_steps", t.aborted_steps},
                   {"retries", t.retries},
                   {"heals", t.heals},
                   {"poisons", t.poisons}};
  out["slots"] = slots_json(s.slot_figures);
  out["heals"] = heals_json(s);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusFeed::StatusFeed(Metrics& metrics, std::string model_id, std::chrono::milliseconds period)
    : metrics_(metrics), model_id_(std::move(model_id)), period_(period) {
  metrics_.on_change([this] {
    std::lock_guard lock(mutex_);
    changed_ = true;
    wake_.notify_one();
  });
  thread_ = std::thread([this] { run(); });
}

StatusFeed::~StatusFeed() {
  metrics_.on_change({});
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    wake_.notify_one();
  }
  thread_.join();
  close();
}

std::string StatusFeed::event() const { return "data: " + status_json(metrics_.snapshot(), model_id_) + "\n\n"; }

void StatusFeed::subscribe(const std::shared_ptr<Responder>& responder) {
  responder->open_stream();
  responder->send_event(event());
  std::lock_guard lock(mutex_);
  if (closed_) return responder->close_stream();
  subscribers_.push_back(responder);
}

void StatusFeed::close() {
  std::vector<std::shared_ptr<Responder>> ended;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    ended.swap(subscribers_);
  }
  for (const auto& responder : ended) responder->close_stream();
}

int StatusFeed::subscribers() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(subscribers_.size());
}

// Each period, or at once after a change: one snapshot, sent to every
// subscriber whose client is still there.
void StatusFeed::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period_, [this] { return stopping_ || changed_; });
    if (stopping_) return;
    changed_ = false;
    std::erase_if(subscribers_, [](const auto& responder) {
      if (!responder->client_gone()) return false;
      responder->close_stream();
      return true;
    });
    if (subscribers_.empty()) continue;
    const auto to = subscribers_;
    lock.unlock();
    const std::string text = event();
    for (const auto& responder : to) responder->send_event(text);
    lock.lock();
  }
}

}  // namespace accord::serve
