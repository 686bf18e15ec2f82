// SPDX-License-Identifier: Apache-2.0
// Undo actions that run on every way out of a command: when their owner is destroyed
// (normal return, an exception), and on SIGINT, SIGTERM, SIGHUP and SIGQUIT, whose handler
// runs every pending action (newest first) and then lets the process die of the signal as
// it would have. The handler only makes async-signal-safe system calls on values prepared
// in advance: writing a saved value back to a file (a /proc/sys setting), removing a
// directory and the files in it (a temporary directory, one level deep), removing a
// directory alone (a tracefs instance), or unmounting a filesystem (tracefs). Before it
// removes a directory alone or unmounts, the handler points any descriptor this process
// still has open under it at /dev/null (a tracefs instance being read would otherwise stay
// busy); no other descriptor is touched, so the process's other threads run on unharmed
// until the signal kills it.
//
// Protection legend: each slot is claimed and released with an atomic state (A); its
// fields are written only while the slot is free and read by the handler and the owner.
#pragma once

#include <cstddef>
#include <string>

namespace quiesce::host {

class exit_cleanup {
 public:
  // Writes `value` to `path` on the way out. Throws std::runtime_error if the path or value
  // is too long to prepare, or if every slot is taken.
  static exit_cleanup restore_file(const std::string& path, const std::string& value);
  // Removes the directory `path` and the files directly in it on the way out.
  static exit_cleanup remove_dir(const std::string& path);
  // rmdir(path) on the way out: a directory whose entries are not files to unlink (a
  // tracefs instance, whose files go with it). On a signal, this process's descriptors
  // under `path` are released first.
  static exit_cleanup remove_empty_dir(const std::string& path);
  // umount2(path, 0) on the way out (a filesystem this process mounted), or, where it is
  // still busy, a lazy detach (MNT_DETACH: it leaves the mount table at once and goes when
  // its last descriptor closes). On a signal, this process's descriptors under `path` are
  // released first; another thread may open one again before the unmount, hence the detach.
  static exit_cleanup unmount(const std::string& path);

  exit_cleanup(exit_cleanup&& other) noexcept;
  exit_cleanup& operator=(exit_cleanup&&) = delete;
  exit_cleanup(const exit_cleanup&) = delete;
  // Runs the action now unless it has run (the signal handler, or run_now()).
  ~exit_cleanup();
  // Runs it now; true if this call ran it and it succeeded.
  bool run_now() noexcept;

 private:
  explicit exit_cleanup(int slot) noexcept : slot_(slot) {}
  int slot_ = -1;
};

}  // namespace quiesce::host
