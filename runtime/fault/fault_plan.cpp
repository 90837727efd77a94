#include "runtime/fault/fault_plan.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace accord {

namespace {

constexpr std::array<FaultKind, 6> kKinds = {FaultKind::error, FaultKind::throws, FaultKind::delay,
                                             FaultKind::exit,  FaultKind::drop,   FaultKind::corrupt};

// The entry and the names in `why` come from a command line or the
// environment, so the message escapes what a terminal would act on.
Error bad_fault(std::string_view text, const std::string& why) {
  return Error(ErrorCode::contract, printable("bad fault '" + std::string(text) + "': " + why +
                                              " (expected RANK:PHASE:KIND[:AT], for example 1:Execution:error)"));
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

template <class T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string phase_names() {
  std::string names;
  for (int i = 0; i < kDistributedExecutionPhaseCount; ++i) {
    if (i > 0) names += ", ";
    names += to_string(static_cast<DistributedExecutionPhase>(i));
  }
  return names;
}

// "Execution", "BoundarySourceReady(0->1)" or "BoundarySourceCompletion(0->1,experts)".
Status parse_phase(std::string_view text, std::string_view field, Fault& fault) {
  std::string_view name = field;
  if (const auto open = field.find('('); open != std::string_view::npos) {
    name = field.substr(0, open);
    if (field.back() != ')') return bad_fault(text, "a route is written (SOURCE->TARGET) or (SOURCE->TARGET,experts)");
    auto ends = field.substr(open + 1, field.size() - open - 2);
    constexpr std::string_view kExperts = ",experts";
    const bool experts = ends.ends_with(kExperts);
    if (experts) ends.remove_suffix(kExperts.size());
    const auto arrow = ends.find("->");
    const auto source = parse_number<RankId>(ends.substr(0, arrow));
    const auto target = arrow == std::string_view::npos ? std::nullopt : parse_number<RankId>(ends.substr(arrow + 2));
    // Both ends kNoRank would be the "no route" value, not a route.
    if (!source || !target || CommunicationRouteId{*source, *target}.is_none()) {
      return bad_fault(text, "a route is written (SOURCE->TARGET) or (SOURCE->TARGET,experts)");
    }
    fault.route = CommunicationRouteId{*source, *target, experts ? RouteKind::experts : RouteKind::activations};
  }
  const auto phase = phase_from_string(name);
  if (!phase) return bad_fault(text, "unknown phase '" + std::string(name) + "'; phases are " + phase_names());
  if (!fault.route.is_none() && !is_boundary_phase(*phase)) {
    return bad_fault(text, "only BoundarySourceCompletion and BoundarySourceReady take a route");
  }
  fault.phase = *phase;
  return {};
}

Status parse_kind(std::string_view text, std::string_view field, Fault& fault) {
  for (FaultKind kind : kKinds) {
    if (to_string(kind) == field) {
      fault.kind = kind;
      return {};
    }
  }
  return bad_fault(text,
                   "unknown kind '" + std::string(field) + "'; kinds are error, throw, delay, exit, drop, corrupt");
}

}  // namespace

std::string_view to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::error: return "error";
    case FaultKind::throws: return "throw";
    case FaultKind::delay: return "delay";
    case FaultKind::exit: return "exit";
    case FaultKind::drop: return "drop";
    case FaultKind::corrupt: return "corrupt";
  }
  return "unknown";
}

std::string to_string(const Fault& fault) {
  std::string text = std::to_string(fault.rank);
  text += ':';
  text += to_string(PhaseId{fault.phase, fault.route});
  text += ':';
  text += to_string(fault.kind);
  text += ':';
  text += std::to_string(fault.occurrence);
  return text;
}

Result<Fault> parse_fault(std::string_view text) {
  const auto fields = split(text, ':');
  if (fields.size() < 3 || fields.size() > 4)
    return bad_fault(text, "it has " + std::to_string(fields.size()) + " fields");
  Fault fault;
  const auto rank = parse_number<RankId>(fields[0]);
  if (!rank) return bad_fault(text, "the rank is not a number");
  fault.rank = *rank;
  if (Status ok = parse_phase(text, fields[1], fault); !ok) return ok.error();
  if (Status ok = parse_kind(text, fields[2], fault); !ok) return ok.error();
  if (fields.size() == 4) {
    const auto at = parse_number<std::uint32_t>(fields[3]);
    if (!at || *at == 0) return bad_fault(text, "the occurrence is a number from 1");
    fault.occurrence = *at;
  }
  const bool cache_save = fault.phase == DistributedExecutionPhase::PromptCacheSavePreparation ||
                          fault.phase == DistributedExecutionPhase::PromptCacheSavePublication;
  if (fault.kind == FaultKind::corrupt && !cache_save) {
    return bad_fault(text, "corrupt applies to PromptCacheSavePreparation and PromptCacheSavePublication");
  }
  return fault;
}

Result<std::vector<Fault>> parse_fault_list(std::string_view text) {
  std::vector<Fault> plan;
  for (std::string_view entry : split(text, ';')) {
    if (entry.empty()) continue;
    auto fault = parse_fault(entry);
    if (!fault) return fault.error();
    plan.push_back(*fault);
  }
  return plan;
}

namespace {

// Whether a session of `ranks` ranks, its experts spread over
// `expert_ranks` of them, has `route` (docs/protocol.md).
bool has_route(const CommunicationRouteId& route, int ranks, int expert_ranks) {
  const auto count = static_cast<RankId>(ranks);
  if (route.source >= count || route.target >= count) return false;
  if (route.kind == RouteKind::activations) return route.target == route.source + 1;
  const auto helps = [&](RankId helper, RankId stage) {
    const auto helpers = expert_helpers(stage, count, static_cast<RankId>(expert_ranks));
    return std::find(helpers.begin(), helpers.end(), helper) != helpers.end();
  };
  return helps(route.target, route.source) || helps(route.source, route.target);
}

}  // namespace

Status check_fault_plan(const std::vector<Fault>& plan, int ranks, int expert_ranks) {
  for (const Fault& fault : plan) {
    if (static_cast<int>(fault.phase) >= kDistributedExecutionPhaseCount || fault.kind > FaultKind::corrupt ||
        fault.occurrence == 0) {
      return Error(ErrorCode::contract, "a fault of rank " + std::to_string(fault.rank) + " names phase " +
                                            std::to_string(static_cast<int>(fault.phase)) + ", kind " +
                                            std::to_string(static_cast<int>(fault.kind)) + ", occurrence " +
                                            std::to_string(fault.occurrence) + ": no such fault");
    }
    if (fault.rank >= static_cast<RankId>(ranks)) {
      return Error(ErrorCode::contract, "the fault " + to_string(fault) + " names rank " + std::to_string(fault.rank) +
                                            " but the session has " + std::to_string(ranks) + " rank(s)");
    }
    if (!fault.route.is_none() && !has_route(fault.route, ranks, expert_ranks)) {
      return Error(ErrorCode::contract, "the fault " + to_string(fault) + " names a route the session does not have");
    }
  }
  return {};
}

Status flip_middle_byte(Env& env, const std::filesystem::path& file) {
  constexpr std::size_t kAnySize = std::size_t{1} << 40;
  auto bytes = env.read_file(file, kAnySize);
  if (!bytes || bytes->empty())
    return Error(ErrorCode::io, "cannot corrupt " + file.string() + ": unreadable or empty");
  std::byte& middle = (*bytes)[bytes->size() / 2];
  middle = ~middle;
  return env.write_file(file, *bytes, false);
}

RankFaults::RankFaults(RankId rank, const std::vector<Fault>& plan) {
  for (const Fault& fault : plan) {
    if (fault.rank == rank) entries_.push_back({fault});
  }
}

std::optional<FaultKind> RankFaults::on_phase(const PhaseId& phase) {
  std::optional<FaultKind> fired;
  for (Entry& entry : entries_) {
    if (!entry.fault.matches(phase)) continue;
    if (++entry.seen == entry.fault.occurrence && !fired) fired = entry.fault.kind;
  }
  return fired;
}

}  // namespace accord
