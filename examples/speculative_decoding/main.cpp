// Speculative decoding over three in-process ranks: greedy generation
// plain and with a drafter (prompt lookup, or a draft model with the
// target's vocabulary), then one prediction-target step driven by hand to
// show what the generator does with each draft.
// Run: speculative_decoding MODEL.bin TOKENIZER.bin lookup|DRAFT.bin [PROMPT]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "accord/distributed_session.hpp"
#include "accord/generate.hpp"

namespace {

using namespace accord;

int fail(const std::string& message) {
  std::fprintf(stderr, "speculative_decoding: %s\n", message.c_str());
  return 1;
}

void print_tokens(const char* label, const std::vector<int>& tokens) {
  std::printf("%s", label);
  for (int t : tokens) std::printf(" %d", t);
  std::printf("\n");
}

Result<std::unique_ptr<DistributedSession>> three_ranks(const Model& model) {
  DistributedOptions options;
  options.ranks = 3;
  return DistributedSession::create(model, options);
}

// Generates 48 tokens greedily on a fresh three-rank session.
GenerationOutcome generate_on_three_ranks(const Model& model, const Tokenizer& tokenizer, const std::string& prompt,
                                          Drafter* drafter) {
  auto session = three_ranks(model);
  if (!session) return GenerationFailure{session.error(), {}};
  DistributedTarget target(**session, model);
  GenerationOptions generation;
  generation.max_tokens = 48;
  generation.sampler.temperature = 0.0f;  // speculation verifies greedily
  generation.drafter = drafter;
  generation.draft_tokens = 4;
  return generate(target, tokenizer, prompt, generation);
}

// One speculative step by hand: the prompt, then a draft of the next three
// greedy tokens with the last one spoiled. The target keeps two.
int show_one_step(const Model& model, const std::vector<int>& prompt, const std::vector<int>& greedy) {
  auto session = three_ranks(model);
  if (!session) return fail(session.error().message());
  const int spoiled = (greedy[2] + 1) % model.config().vocab_size;
  const PredictionTargetInput input{{prompt.back(), greedy[0], greedy[1], spoiled}, 3};
  auto prefix = std::vector<int>(prompt.begin(), prompt.end() - 1);
  if (auto step = (*session)->prefill(prefix); !step) return fail(step.error().message());
  auto step = (*session)->step({.tokens = input.tokens, .prediction_target = true, .draft_tokens = input.draft_tokens});
  if (!step) return fail(step.error().message());
  std::printf("one step: draft %d %d %d -> kept %d, greedy's next %d, position %d\n", input.tokens[1], input.tokens[2],
              input.tokens[3], step->accepted, step->next_token, (*session)->position());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return fail("usage: speculative_decoding MODEL.bin TOKENIZER.bin lookup|DRAFT.bin [PROMPT]");
  // The tokenizer is checked against the model's header before the weights are read.
  auto header = Model::read_header(argv[1]);
  if (!header) return fail(header.error().message());
  auto tokenizer = Tokenizer::load(argv[2]);
  if (!tokenizer) return fail(tokenizer.error().message());
  if (Status fits = tokenizer->check_fits(header->config.vocab_size); !fits) return fail(fits.error().message());
  auto model = Model::load(argv[1]);
  if (!model) return fail(model.error().message());
  const std::string prompt = argc > 4 ? argv[4] : "Once upon a time";

  std::unique_ptr<Model> draft_model;
  std::unique_ptr<Drafter> drafter;
  if (std::string(argv[3]) == "lookup") {
    drafter = std::make_unique<PromptLookupDrafter>();
  } else {
    auto loaded = Model::load(argv[3]);
    if (!loaded) return fail(loaded.error().message());
    if (Status ok = check_draft_model(loaded->config(), model->config()); !ok) return fail(ok.error().message());
    draft_model = std::make_unique<Model>(std::move(*loaded));
    drafter = std::make_unique<ModelDrafter>(*draft_model, 1);
  }

  auto plain = generate_on_three_ranks(*model, *tokenizer, prompt, nullptr);
  if (!plain) return fail(plain.error().message());
  auto speculative = generate_on_three_ranks(*model, *tokenizer, prompt, drafter.get());
  if (!speculative) return fail(speculative.error().message());
  print_tokens("greedy:", plain->generated_tokens);
  print_tokens("speculative:", speculative->generated_tokens);
  std::printf("identical to greedy: %s\n", plain->generated_tokens == speculative->generated_tokens ? "yes" : "no");
  std::printf("decode steps: %d plain, %d speculative; %d of %d drafted tokens accepted\n", plain->decode_steps,
              speculative->decode_steps, speculative->accepted_tokens, speculative->drafted_tokens);
  return show_one_step(*model, plain->prompt_tokens, plain->generated_tokens);
}
