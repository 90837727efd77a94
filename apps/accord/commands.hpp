// The subcommands of the `accord` command line. Each registers its options
// on the app and returns the function that runs it once parsing succeeded;
// that function returns the process exit code.
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace accord::cli {

using Command = std::function<int()>;

Command add_generate_command(CLI::App& app);
Command add_synth_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_node_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);

// Prints "accord: error: <message>" to stderr, unprintable bytes escaped
// (accord::printable), and returns exit code 1.
int fail(const std::string& message);

// Prints "accord: warning: <message>" to stderr, escaped as fail() does.
void warn(const std::string& message);

}  // namespace accord::cli
