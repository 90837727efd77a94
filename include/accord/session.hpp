// A text session on one rank: every step, checkpoint, rollback, reset and
// prompt-cache load or save is one transaction that commits or leaves the
// session exactly as it was. Session::step takes StepOptions (an observer,
// a prediction target, sampling); prefill, decode and forward are its
// common cases.
#pragma once

#include "accord/error.hpp"
#include "accord/model.hpp"
#include "accord/text.hpp"
#include "runtime/session/session.hpp"
#include "runtime/session/step_options.hpp"
