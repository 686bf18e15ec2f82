// SPDX-License-Identifier: Apache-2.0
// What this machine is and can do, as measured now: the context every result needs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace quiesce::cli {

// Kernel, CPU model, usable CPUs and their groups per affinity scope, clock costs,
// schedstat availability and cost, whether threads may raise their priority.
nlohmann::json machine_facts();

// The facts as a Markdown section body.
std::string machine_markdown(const nlohmann::json& facts);

}  // namespace quiesce::cli
