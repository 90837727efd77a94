// A node of a remote cluster (`accord node`): a process that runs one rank
// of a session whose coordinator lives elsewhere (DESIGN.md, "Ranks as
// actors"). Its node actor, published with CAF's middleman, waits for an
// assignment (messages/node_api.hpp), loads the model, checks its
// identity, spawns the rank's actors (actors/rank_actors.hpp) and answers
// with the rank's actor.
//
// The actor to publish is a scheduled front; the work runs in a detached
// actor behind it that never leaves the process. No other node may hold a
// detached actor: CAF 0.17.6 can strand the last reference to such an actor
// in its middleman at shutdown, and the actor system then waits for the
// actor's thread forever (node.cpp, front_actor).
//
// A node serves one session at a time: a new assignment replaces the rank
// it runs, and the rank goes when its coordinator does (the client exited
// or its connection broke). A node loads one model over its life; an
// assignment for a model of another identity is refused.
#pragma once

#include <caf/actor_system.hpp>
#include <memory>
#include <string>

#include "actors/interfaces.hpp"
#include "runtime/model/model.hpp"

namespace accord {

struct NodeOptions {
  std::string name;                    // how errors and logs name the node: "node HOST:PORT"
  std::shared_ptr<const Model> model;  // loaded at start (--model), or none: the first assignment's
};

// Spawns the node actor and returns its front, the actor to publish. It
// answers (assign_atom, NodeAssignment, coordinator) with (failure, rank
// actor): an empty failure and the rank's actor, or why the node refused
// and no actor; (name_atom, name) renames it. It logs with
// spdlog. Exiting it stops the node and the rank it runs.
NodeActor spawn_node(caf::actor_system& system, NodeOptions options);

}  // namespace accord
