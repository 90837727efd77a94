// A small CAF service that embeds accord: the service's own actor system
// hosts a two-rank distributed session, and the service's own actor talks
// to it in typed messages, asynchronously, while main() also uses the C++
// handle. Run: embed_in_service MODEL.bin [PROMPT_TOKEN...]
#include <caf/all.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "accord/actors.hpp"

namespace {

using generate_atom = caf::atom_constant<caf::atom("generate")>;

struct ServiceState {
  accord::CoordinatorActor session;  // the coordinator
  std::vector<int> generated;
  int remaining = 0;
  caf::response_promise promise;
};

using ServiceActor = caf::stateful_actor<ServiceState>;

// One decode step as one transaction; the reply's handler starts the next,
// so the actor never blocks its scheduler thread.
void request_step(ServiceActor* self, std::vector<int> tokens) {
  accord::ForwardStepRequest step;
  step.tokens = std::move(tokens);
  const accord::TransactionRequest request{std::move(step)};
  self->request(self->state.session, caf::infinite, request).then([=](accord::TransactionReply& reply) {
    auto& s = self->state;
    if (reply.outcome != accord::TransactionOutcome::committed) {
      s.promise.deliver(caf::make_error(caf::sec::runtime_error, reply.message));
      return;
    }
    const int next = accord::argmax(reply.logits.data);
    s.generated.push_back(next);
    if (--s.remaining == 0) {
      s.promise.deliver(s.generated);
    } else {
      request_step(self, {next});
    }
  });
}

// The service's own actor: greedy generation of `count` tokens.
caf::behavior greedy_service(ServiceActor* self, accord::CoordinatorActor session) {
  self->state.session = std::move(session);
  return {
      [=](generate_atom, std::vector<int> prompt, int count) {
        self->state.generated.clear();
        self->state.remaining = count;
        self->state.promise = self->make_response_promise();
        request_step(self, std::move(prompt));
        return caf::delegated<std::vector<int>>();
      },
  };
}

class ServiceConfig : public caf::actor_system_config {
 public:
  ServiceConfig() {
    accord::register_distributed_session_types(*this);
    accord::use_low_latency_scheduling(*this);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.bin [PROMPT_TOKEN...]\n", argv[0]);
    return 2;
  }
  auto model = accord::Model::load(argv[1]);
  if (!model) {
    std::fprintf(stderr, "error: %s\n", model.error().message().c_str());
    return 1;
  }
  std::vector<int> prompt = {1};
  for (int i = 2; i < argc; ++i) prompt.push_back(std::stoi(argv[i]));

  ServiceConfig config;
  caf::actor_system system{config};
  accord::DistributedOptions options;
  options.ranks = 2;
  auto session = accord::create_in_system(system, *model, options);
  if (!session) {
    std::fprintf(stderr, "error: %s\n", session.error().message().c_str());
    return 1;
  }

  // Typed messages, from the service's actor.
  auto service = system.spawn(greedy_service, accord::coordinator_of(**session));
  caf::scoped_actor self{system};
  int status = 0;
  self->request(service, caf::infinite, generate_atom::value, prompt, 10)
      .receive(
          [&](const std::vector<int>& tokens) {
            std::printf("generated:");
            for (int t : tokens) std::printf(" %d", t);
            std::printf("\n");
          },
          [&](caf::error& error) {
            std::fprintf(stderr, "error: %s\n", system.render(error).c_str());
            status = 1;
          });
  self->send_exit(service, caf::exit_reason::user_shutdown);

  // The C++ handle on the same session: one blocking call per transaction.
  auto checkpoint = (*session)->checkpoint();
  if (!checkpoint) {
    std::fprintf(stderr, "error: %s\n", checkpoint.error().message().c_str());
    return 1;
  }
  std::printf("position %d on %d ranks\n", checkpoint->position, (*session)->ranks());
  return status;
}
