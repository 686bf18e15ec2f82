// SPDX-License-Identifier: Apache-2.0
// Work items: naming, the pending query, and destruction (the debugobjects check).
#include <cxxabi.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>

#include "../base/die.hpp"
#include "internal.hpp"
#include "quiesce/log.hpp"
#include "quiesce/trace.hpp"

namespace quiesce {

namespace detail {

namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  char* out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && out ? out : mangled;
  std::free(out);  // allocated by the demangler with malloc
  return name;
}

// The kernel prints work functions with %ps: the symbol name. For a plain function we find
// its symbol (exported functions; others need -rdynamic); otherwise we name the callable's
// type, which for a lambda says where it was written.
std::string callable_name(const callable_identity& id) {
  if (id.plain != nullptr) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(id.plain), &info) != 0 && info.dli_sname) {
      std::string name = demangle(info.dli_sname);
      if (const auto paren = name.find('('); paren != std::string::npos) name.resize(paren);
      return name;
    }
  }
  return demangle(id.type->name());
}

void check_callable(const work_fn<work>& fn) {
  if (fn.empty()) throw std::invalid_argument("fn: a work item needs a function");
}

}  // namespace

const std::string& name_of_function(const work_fn<work>& fn) {
  check_callable(fn);
  return trace::intern_string(callable_name(fn.identity()));
}

const std::string& name_item(std::string_view name, const work_fn<work>& fn) {
  check_callable(fn);
  return trace::intern_string(name);
}

const std::string& posted_name(const std::type_info& type) {
  return trace::intern_string(demangle(type.name()));
}

}  // namespace detail

work::~work() {
  // In a fork child no worker runs it and no queue can take it: its state is the parent's.
  if (detail::in_forked_child()) return;
  auto busy = [this] {
    return (state_.flags.load(std::memory_order_seq_cst) & detail::work_pending) ||
           state_.running_id.load(std::memory_order_seq_cst) != 0;
  };
  // Destroyed by its own function (delete this, or its owner freed from it) - the
  // kernel's kfree() of a work_struct from its work function: the worker will not touch
  // it again. Only a re-queued instance (pending again) would be lost: that is a bug.
  if (detail::note_running_item_destroyed(*this)) {
    if (state_.flags.load(std::memory_order_seq_cst) & detail::work_pending) {
      detail::die("BUG: work %s destroyed by its own function while queued again", name_->c_str());
    }
    return;
  }
  // At exit (a static item destroyed while its last instance runs or is being dropped),
  // wait for that instance: nothing can queue it any more.
  if (busy() && detail::process_exiting() && current_work() != this) cancel_sync();
  if (busy()) {
    const bool pending = state_.flags.load(std::memory_order_seq_cst) & detail::work_pending;
    detail::die("BUG: work %s destroyed while %s", name_->c_str(), pending ? "pending" : "running");
  }
}

bool work::pending() const noexcept {
  return state_.flags.load(std::memory_order_seq_cst) & detail::work_pending;
}

}  // namespace quiesce
