// Fault plans: the RANK:PHASE:KIND[:AT] syntax of --fault and ACCORD_FAULTS,
// its errors, and how a rank counts occurrences.
#include "runtime/fault/fault_plan.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/base/environment.hpp"

namespace accord {
namespace {

using enum DistributedExecutionPhase;

TEST(FaultPlan, ParsesEveryField) {
  auto fault = parse_fault("2:OutputPublication:error");
  ASSERT_TRUE(fault) << fault.error().message();
  EXPECT_EQ(*fault, (Fault{2, OutputPublication, CommunicationRouteId{}, FaultKind::error, 1}));

  fault = parse_fault("1:SamplingSynchronization:throw:2");
  ASSERT_TRUE(fault) << fault.error().message();
  EXPECT_EQ(*fault, (Fault{1, SamplingSynchronization, CommunicationRouteId{}, FaultKind::throws, 2}));

  fault = parse_fault("0:BoundarySourceReady(0->1):drop");
  ASSERT_TRUE(fault) << fault.error().message();
  EXPECT_EQ(*fault, (Fault{0, BoundarySourceReady, CommunicationRouteId{0, 1}, FaultKind::drop, 1}));
  EXPECT_EQ(to_string(*fault), "0:BoundarySourceReady(0->1):drop:1");
  EXPECT_EQ(parse_fault(to_string(*fault)).value(), *fault);
}

TEST(FaultPlan, RefusesMalformedEntriesWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"1:Execution", "2 fields"},
      {"x:Execution:error", "rank is not a number"},
      {"-1:Execution:error", "rank is not a number"},
      {"1:Exekution:error", "unknown phase 'Exekution'"},
      {"1:Execution:explode", "unknown kind 'explode'"},
      {"1:Execution:error:0", "occurrence"},
      {"1:Execution:error:two", "occurrence"},
      {"1:Execution(0->1):error", "only BoundarySourceCompletion"},
      {"1:BoundarySourceReady(0-1):error", "(SOURCE->TARGET)"},
      {"1:Execution:corrupt", "corrupt applies"},
      {"1:Execution:error:1:2", "5 fields"},
  };
  for (const auto& [text, why] : cases) {
    auto fault = parse_fault(text);
    ASSERT_FALSE(fault) << text;
    EXPECT_EQ(fault.error().code(), ErrorCode::contract);
    EXPECT_NE(fault.error().message().find(why), std::string::npos) << fault.error().message();
  }
}

TEST(FaultPlan, ErrorsEscapeUnprintableBytes) {
  auto fault = parse_fault("1:Exec\x1B[2Jution:error\xFF");
  ASSERT_FALSE(fault);
  EXPECT_EQ(fault.error().message().find('\x1B'), std::string::npos) << fault.error().message();
  EXPECT_NE(
      fault.error().message().find("bad fault '1:Exec\\x1B[2Jution:error\\xFF': unknown phase 'Exec\\x1B[2Jution'"),
      std::string::npos)
      << fault.error().message();
}

// The one route that printed as none and so parsed back as another fault.
TEST(FaultPlan, RefusesTheNoRouteValueAsARoute) {
  EXPECT_FALSE(parse_fault("0:BoundarySourceReady(4294967295->4294967295):drop"));
}

TEST(FaultPlan, ListsAndTheEnvironment) {
  auto plan = parse_fault_list("1:Execution:error;;2:Commit:exit:3;");
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[1], (Fault{2, Commit, CommunicationRouteId{}, FaultKind::exit, 3}));
  EXPECT_FALSE(parse_fault_list("1:Execution:error;oops"));

  ::setenv("ACCORD_FAULTS", "0:StateCheckpoint:delay", 1);
  ::setenv("ACCORD_SECRET_FILE", "/some/secret", 1);
  auto from_env = read_environment();
  ::setenv("ACCORD_FAULTS", "0:StateCheckpoint:oops", 1);
  auto malformed = read_environment();
  ::unsetenv("ACCORD_FAULTS");
  ::unsetenv("ACCORD_SECRET_FILE");
  ASSERT_TRUE(from_env) << from_env.error().message();
  EXPECT_EQ(from_env->faults.size(), 1u);
  EXPECT_EQ(from_env->secret_file, "/some/secret");
  EXPECT_EQ(from_env->secret_file_for(""), "/some/secret");
  EXPECT_EQ(from_env->secret_file_for("/given"), "/given");
  ASSERT_FALSE(malformed);
  EXPECT_NE(malformed.error().message().find("ACCORD_FAULTS: "), std::string::npos);
  auto unset = read_environment();
  ASSERT_TRUE(unset);
  EXPECT_TRUE(unset->faults.empty());
  EXPECT_TRUE(unset->secret_file.empty());
}

TEST(FaultPlan, IsCheckedAgainstTheTopology) {
  EXPECT_TRUE(check_fault_plan(parse_fault_list("2:Execution:error").value(), 3));
  auto too_far = check_fault_plan(parse_fault_list("3:Execution:error").value(), 3);
  ASSERT_FALSE(too_far);
  EXPECT_NE(too_far.error().message().find("has 3 rank(s)"), std::string::npos);
  EXPECT_FALSE(check_fault_plan(parse_fault_list("0:BoundarySourceReady(0->2):error").value(), 3));
  EXPECT_FALSE(check_fault_plan(parse_fault_list("0:BoundarySourceReady(2->3):error").value(), 3));
}

// A plan that came off the wire was never parsed: values no parser gives
// are refused by the check.
TEST(FaultPlan, TheCheckRefusesAKindPhaseOrOccurrenceThatDoesNotExist) {
  const Fault good{0, Execution, {}, FaultKind::error, 1};
  Fault unknown_kind = good;
  unknown_kind.kind = static_cast<FaultKind>(6);
  Fault unknown_phase = good;
  unknown_phase.phase = static_cast<DistributedExecutionPhase>(kDistributedExecutionPhaseCount);
  Fault never = good;
  never.occurrence = 0;
  EXPECT_TRUE(check_fault_plan({good}, 1));
  for (const Fault& bad : {unknown_kind, unknown_phase, never}) {
    const Status checked = check_fault_plan({bad}, 1);
    ASSERT_FALSE(checked);
    EXPECT_NE(checked.error().message().find("no such fault"), std::string::npos);
  }
}

TEST(FaultPlan, ARankFiresEachFaultOnceAtItsOccurrence) {
  RankFaults faults(1, parse_fault_list("1:Execution:error:2;0:Execution:exit;1:BoundarySourceReady:drop").value());
  EXPECT_EQ(faults.on_phase(phase_id(Execution)), std::nullopt);  // the first time
  EXPECT_EQ(faults.on_phase(phase_id(StateCheckpoint)), std::nullopt);
  EXPECT_EQ(faults.on_phase(phase_id(Execution)), FaultKind::error);
  EXPECT_EQ(faults.on_phase(phase_id(Execution)), std::nullopt);  // once only
  // Without a route, a boundary fault matches the routes the rank is an end of.
  EXPECT_EQ(faults.on_phase(boundary_phase_id(BoundarySourceReady, 2, 3)), std::nullopt);
  EXPECT_EQ(faults.on_phase(boundary_phase_id(BoundarySourceReady, 1, 2)), FaultKind::drop);
  EXPECT_EQ(faults.on_phase(boundary_phase_id(BoundarySourceReady, 0, 1)), std::nullopt);
}

}  // namespace
}  // namespace accord
