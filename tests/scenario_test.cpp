// Protocol scenarios as text, in the manner of etcd raft's datadriven tests:
// each file in tests/scenarios/ is a list of commands fed to a
// CoordinatorAgreement, each followed by `----` and the messages, settled
// decisions and errors it must produce. A reviewer reads a behaviour change
// as a diff of these files.
//
// ACCORD_REWRITE_SCENARIOS=1 ctest ... rewrites the expected output from
// what the code does now; read the diff before committing it.
//
// Commands (one handler each):
//   coordinator ranks=N [status_deadline=T] [ack_deadline=T]
//   begin epoch=E phase=NAME [route=S->T] [last]
//   reset epoch=E
//   status rank=R epoch=E phase=NAME [route=S->T] ok|error
//   ack rank=R epoch=E restored|failed
//   tick [n=K]
//   down rank=R
//   up rank=R
//   dropped
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/agreement/coordinator_agreement.hpp"

namespace accord {
namespace {

constexpr SessionId kSession = 1;

struct Command {
  std::string name;
  std::map<std::string, std::string> arguments;  // key=value
  std::vector<std::string> flags;                // bare words

  bool has(const std::string& flag) const { return std::find(flags.begin(), flags.end(), flag) != flags.end(); }
  std::uint64_t number(const std::string& key, std::uint64_t fallback = 0) const {
    const auto it = arguments.find(key);
    return it == arguments.end() ? fallback : std::stoull(it->second);
  }
  std::uint32_t u32(const std::string& key, std::uint64_t fallback = 0) const {
    return static_cast<std::uint32_t>(number(key, fallback));
  }
};

Command parse(const std::string& line) {
  Command command;
  std::istringstream words(line);
  words >> command.name;
  for (std::string word; words >> word;) {
    const auto equals = word.find('=');
    if (equals == std::string::npos) {
      command.flags.push_back(word);
    } else {
      command.arguments[word.substr(0, equals)] = word.substr(equals + 1);
    }
  }
  return command;
}

DistributedExecutionPhase phase_named(const std::string& name) {
  for (int i = 0; i < kDistributedExecutionPhaseCount; ++i) {
    const auto phase = static_cast<DistributedExecutionPhase>(i);
    if (to_string(phase) == name) return phase;
  }
  throw std::invalid_argument("no phase named " + name);
}

PhaseId phase_of(const Command& command) {
  PhaseId id = phase_id(phase_named(command.arguments.at("phase")));
  if (const auto route = command.arguments.find("route"); route != command.arguments.end()) {
    const auto arrow = route->second.find("->");
    id.route = {static_cast<RankId>(std::stoul(route->second.substr(0, arrow))),
                static_cast<RankId>(std::stoul(route->second.substr(arrow + 2)))};
  }
  return id;
}

std::string show(const CoordinatorMessage& message) {
  std::string text = "-> " + std::to_string(message.to) + " ";
  if (const auto* begin = std::get_if<PhaseBegin>(&message.message)) {
    return text + "begin " + to_string(begin->phase) + " of epoch " + std::to_string(begin->epoch);
  }
  return text + describe(std::get<PhaseDecision>(message.message));
}

// Runs the commands of one scenario against one coordinator.
class ScenarioRunner {
 public:
  std::string run(const Command& command) {
    const auto handler = handlers_.find(command.name);
    if (handler == handlers_.end()) return "unknown command " + command.name + "\n";
    if (!coordinator_ && command.name != "coordinator") return "no coordinator yet\n";
    std::string out = handler->second(command);
    if (coordinator_) out += take_ready();
    return out;
  }

 private:
  std::string take_ready() {
    std::string out;
    const CoordinatorReady ready = coordinator_->take_ready();
    for (const CoordinatorMessage& message : ready.messages) out += show(message) + "\n";
    for (const PhaseDecision& settled : ready.settled) out += "settled " + describe(settled) + "\n";
    return out;
  }

  static std::string result(const Status& status) {
    if (status.ok()) return "";
    return "error " + std::string(to_string(status.error().code())) + ": " + status.error().message() + "\n";
  }

  std::string coordinator(const Command& c) {
    coordinator_.emplace(kSession, c.u32("ranks"),
                         AgreementOptions{c.u32("status_deadline", 10), c.u32("ack_deadline", 10)});
    return "";
  }
  std::string begin(const Command& c) {
    return result(coordinator_->begin(c.number("epoch"), phase_of(c),
                                      c.has("last") ? PhasePosition::last : PhasePosition::intermediate));
  }
  std::string reset(const Command& c) { return result(coordinator_->begin_reset(c.number("epoch"))); }
  std::string status(const Command& c) {
    const bool ok = c.has("ok");
    coordinator_->step(PhaseStatus{kSession, c.number("epoch"), phase_of(c), c.u32("rank"), ok, FailureCode::mechanism,
                                   ok ? "" : "injected"});
    return "";
  }
  std::string ack(const Command& c) {
    const bool restored = c.has("restored");
    coordinator_->step(
        AbortAcknowledgement{kSession, c.number("epoch"), c.u32("rank"), restored, restored ? "" : "injected"});
    return "";
  }
  std::string tick(const Command& c) {
    for (std::uint64_t i = 0; i < c.number("n", 1); ++i) coordinator_->tick();
    return "";
  }
  std::string down(const Command& c) {
    coordinator_->rank_down(c.u32("rank"));
    return "";
  }
  std::string up(const Command& c) {
    coordinator_->rank_up(c.u32("rank"));
    return "";
  }
  std::string dropped(const Command&) {
    std::string out;
    for (std::size_t i = 0; i < kDropReasonCount; ++i) {
      const auto reason = static_cast<DropReason>(i);
      if (const auto n = coordinator_->dropped().of(reason)) {
        out += std::string(to_string(reason)) + " " + std::to_string(n) + "\n";
      }
    }
    return out;
  }

  using Handler = std::function<std::string(const Command&)>;
  Handler bind(std::string (ScenarioRunner::*member)(const Command&)) {
    return [this, member](const Command& c) { return (this->*member)(c); };
  }

  std::optional<CoordinatorAgreement> coordinator_;
  const std::map<std::string, Handler> handlers_ = {{"coordinator", bind(&ScenarioRunner::coordinator)},
                                                    {"begin", bind(&ScenarioRunner::begin)},
                                                    {"reset", bind(&ScenarioRunner::reset)},
                                                    {"status", bind(&ScenarioRunner::status)},
                                                    {"ack", bind(&ScenarioRunner::ack)},
                                                    {"tick", bind(&ScenarioRunner::tick)},
                                                    {"down", bind(&ScenarioRunner::down)},
                                                    {"up", bind(&ScenarioRunner::up)},
                                                    {"dropped", bind(&ScenarioRunner::dropped)}};
};

// A scenario file: blocks of `command`, `----`, expected output, blank line.
// Lines starting with # outside a block are comments and are kept.
struct Block {
  std::string command;
  std::string expected;
};

struct Scenario {
  std::vector<std::string> comments_before;  // per block, joined
  std::vector<Block> blocks;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Scenario parse_scenario(const std::string& text) {
  Scenario scenario;
  std::istringstream lines(text);
  std::string comments;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line.starts_with("#")) {
      comments += line + "\n";
      continue;
    }
    Block block{line, {}};
    std::getline(lines, line);  // ----
    while (std::getline(lines, line) && !line.empty()) block.expected += line + "\n";
    scenario.comments_before.push_back(std::exchange(comments, {}));
    scenario.blocks.push_back(block);
  }
  return scenario;
}

std::string render(const Scenario& scenario, const std::vector<std::string>& outputs) {
  std::string text;
  for (std::size_t i = 0; i < scenario.blocks.size(); ++i) {
    if (i > 0) text += "\n";
    text += scenario.comments_before[i] + scenario.blocks[i].command + "\n----\n" + outputs[i];
  }
  return text;
}

class ScenarioTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScenarioTest, ProducesTheExpectedMessagesAndDecisions) {
  const std::filesystem::path path = std::filesystem::path(ACCORD_SCENARIO_DIR) / GetParam();
  const Scenario scenario = parse_scenario(read_file(path));
  ASSERT_FALSE(scenario.blocks.empty()) << path;
  ScenarioRunner runner;
  std::vector<std::string> outputs;
  for (const Block& block : scenario.blocks) {
    outputs.push_back(runner.run(parse(block.command)));
    if (!std::getenv("ACCORD_REWRITE_SCENARIOS")) {
      EXPECT_EQ(outputs.back(), block.expected) << GetParam() << ": " << block.command;
    }
  }
  if (std::getenv("ACCORD_REWRITE_SCENARIOS")) std::ofstream(path) << render(scenario, outputs);
}

std::vector<std::string> scenario_files() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(ACCORD_SCENARIO_DIR)) {
    if (entry.path().extension() == ".txt") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Files, ScenarioTest, ::testing::ValuesIn(scenario_files()),
                         [](const ::testing::TestParamInfo<std::string>& file) {
                           return file.param.substr(0, file.param.size() - 4);  // without ".txt"
                         });

}  // namespace
}  // namespace accord
