// A session whose model is split over ranks, each a group of actors: in
// this process (DistributedSession::create) or on `accord node` processes
// (connect), with spares and healing. The same step API and operations as
// Session; every call is one transaction across every rank. Neither this
// header nor anything it includes names a CAF type: the CAF entry points
// are accord/actors.hpp's.
#pragma once

#include "accord/error.hpp"
#include "accord/model.hpp"
#include "accord/session.hpp"
#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
