// SPDX-License-Identifier: Apache-2.0
// quiesce info - what this machine is and can do (topology, clock costs, schedstat,
// priority), as every experiment's results depend on it.
#include <fmt/format.h>

#include "machine.hpp"
#include "registry.hpp"

namespace quiesce::cli {
namespace {

const command_registrar info_command{
    {"info", [](CLI::App& app) {
       auto* sub = app.add_subcommand("info",
                                      "Show this machine's CPUs, cache groups, clock and "
                                      "schedstat costs, and priority permissions");
       auto json = std::make_shared<bool>(false);
       sub->add_flag("--json", *json, "Print the facts as one JSON object on stdout");
       sub->callback([json] {
         const nlohmann::json facts = machine_facts();
         if (*json) {
           fmt::print("{}\n", facts.dump(2));
         } else {
           fmt::print("{}", machine_markdown(facts));
         }
       });
     }}};

}  // namespace
}  // namespace quiesce::cli
