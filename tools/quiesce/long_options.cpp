// SPDX-License-Identifier: Apache-2.0
// getopt_long's abbreviations (long_options.hpp).
#include "long_options.hpp"

#include <fmt/format.h>

#include "commands.hpp"

namespace quiesce::cli {

namespace {

// The long option names `app` takes (without the dashes).
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& n : o->get_lnames())
      names.push_back(n);
  }
  return names;
}

const CLI::App* subcommand_named(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> expand_abbreviations(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> out;
  const CLI::App* current = &app;
  bool rest_as_is = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i == 0 || rest_as_is) {
      out.push_back(std::move(arg));
      continue;
    }
    if (arg == "--") {
      rest_as_is = true;
    } else if (arg.rfind("--", 0) != 0) {
      if (const CLI::App* sub = subcommand_named(*current, arg)) current = sub;
    } else {
      const std::size_t eq = arg.find('=');
      const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      const std::vector<std::string> names = long_names(*current);
      std::vector<std::string> matches;
      for (const std::string& n : names) {
        if (n == name) {
          matches = {n};
          break;
        }
        if (n.rfind(name, 0) == 0) matches.push_back(n);
      }
      if (matches.size() > 1) {
        std::string all;
        for (const std::string& m : matches)
          all += fmt::format(" '--{}'", m);
        throw usage_error(fmt::format("option '--{}' is ambiguous; possibilities:{}", name, all));
      }
      if (matches.size() == 1 && matches[0] != name) {
        arg = "--" + matches[0] + (eq == std::string::npos ? "" : arg.substr(eq));
      }
    }
    out.push_back(std::move(arg));
  }
  return out;
}

}  // namespace quiesce::cli
