// accord: run a language-model text session from the command line.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "apps/accord/commands.hpp"
#include "kernels/cpu/isa.hpp"
#include "runtime/base/error.hpp"

namespace accord::cli {

// Messages quote options, files and the environment: printed escaped.
int fail(const std::string& message) {
  std::fflush(stdout);
  std::cerr << "accord: error: " << printable(message) << std::endl;
  return 1;
}

void warn(const std::string& message) { std::cerr << "accord: warning: " << printable(message) << std::endl; }

}  // namespace accord::cli

int main(int argc, char** argv) {
  // The log goes to stderr: stdout carries what scripts read (serve's
  // address line, generate's text or --json).
  spdlog::set_default_logger(spdlog::stderr_color_mt("accord"));
  CLI::App app{"accord: a transaction-safe runtime for language-model text sessions"};
  app.require_subcommand(1);
  const accord::cli::Command generate = accord::cli::add_generate_command(app);
  const accord::cli::Command synth = accord::cli::add_synth_command(app);
  const accord::cli::Command inspect = accord::cli::add_inspect_command(app);
  const accord::cli::Command convert = accord::cli::add_convert_command(app);
  const accord::cli::Command node = accord::cli::add_node_command(app);
  const accord::cli::Command bench = accord::cli::add_bench_command(app);
  const accord::cli::Command serve = accord::cli::add_serve_command(app);
  const accord::cli::Command tokenize = accord::cli::add_tokenize_command(app);
  if (argc > 1 && argv[1][0] != '-') {
    const auto known = app.get_subcommands([&](CLI::App* sub) { return sub->get_name() == argv[1]; });
    if (known.empty()) {
      std::cerr << "accord: error: unknown command '" << accord::printable(argv[1])
                << "' (commands: generate, synth, inspect, convert, node, bench, serve, tokenize)" << std::endl;
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "accord: error: " << accord::printable(e.what()) << "\nRun with --help for usage." << std::endl;
    return 2;
  }
  if (const char* path = std::getenv("ACCORD_CPU_PATH"); path != nullptr) {
    if (const std::string refused = accord::cpu::use_isa(path); !refused.empty()) {
      std::cerr << "accord: error: ACCORD_CPU_PATH: " << accord::printable(refused) << std::endl;
      return 2;
    }
  }
  try {
    if (app.got_subcommand("generate")) return generate();
    if (app.got_subcommand("serve")) return serve();
    if (app.got_subcommand("inspect")) return inspect();
    if (app.got_subcommand("convert")) return convert();
    if (app.got_subcommand("node")) return node();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("tokenize")) return tokenize();
    return synth();
  } catch (const std::exception& e) {
    return accord::cli::fail(std::string("unexpected failure: ") + e.what());
  }
}
