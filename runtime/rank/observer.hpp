// Observers see, and may replace in place, what a forward step computes:
// the residual stream after each unit, and the final logits. This is how
// activation capture and steering hook into a step. An intervention is part
// of the step: an observer that returns an error or throws aborts it, and
// the session restores the state it had before.
#pragma once

#include <span>

#include "runtime/base/error.hpp"

namespace accord {

class StepObserver {
 public:
  virtual ~StepObserver() = default;

  // hidden: (rows, dim), the tokens at positions first_position, ... after
  // `unit` ran. Changes to it flow into the next unit.
  virtual Status on_unit_output(int unit, int first_position, std::span<float> hidden, int rows) {
    (void)unit, (void)first_position, (void)hidden, (void)rows;
    return {};
  }

  // logits: (rows, vocab), the rows the step returns. Changes to them are
  // what the caller receives.
  virtual Status on_logits(int first_position, std::span<float> logits, int rows) {
    (void)first_position, (void)logits, (void)rows;
    return {};
  }
};

}  // namespace accord
