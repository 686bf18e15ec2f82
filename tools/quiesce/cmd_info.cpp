// SPDX-License-Identifier: Apache-2.0
// quiesce info - what this machine is and can do (topology, clock costs, schedstat,
// priority), as every experiment's results depend on it.
#include <fmt/format.h>

#include "commands.hpp"
#include "quiesce/experiments/machine.hpp"

namespace quiesce::cli {

void add_info_command(CLI::App& app) {
  auto* sub = app.add_subcommand("info",
                                 "Show this machine's CPUs, cache groups, clock and "
                                 "schedstat costs, and priority permissions");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print the facts as one JSON object on stdout");
  sub->callback([json] {
    const experiments::machine_facts facts = experiments::measure_machine();
    fmt::print("{}", *json ? facts.to_json().dump(2) + "\n" : facts.markdown());
  });
}

}  // namespace quiesce::cli
