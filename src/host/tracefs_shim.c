// SPDX-License-Identifier: Apache-2.0
/* libtracefs behind a C interface (tracefs_shim.h). */
#include "tracefs_shim.h"

#include <event-parse.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <tracefs.h>
#include <unistd.h>

int qtf_set_tracing_dir(const char* dir) {
  char copy[256];
  if (strlen(dir) >= sizeof copy) return -1;
  strcpy(copy, dir); /* libtracefs keeps its own copy */
  return tracefs_set_tracing_dir(copy);
}

const char* qtf_tracing_dir(void) {
  return tracefs_tracing_dir();
}

struct qtf_instance* qtf_instance_create(const char* name) {
  return (struct qtf_instance*)tracefs_instance_create(name);
}

void qtf_instance_free(struct qtf_instance* instance) {
  tracefs_instance_free((struct tracefs_instance*)instance);
}

int qtf_instance_file_write(struct qtf_instance* instance, const char* file, const char* str) {
  return tracefs_instance_file_write((struct tracefs_instance*)instance, file, str);
}

int qtf_event_file_write(struct qtf_instance* instance, const char* system, const char* event,
                         const char* file, const char* str) {
  return tracefs_event_file_write((struct tracefs_instance*)instance, system, event, file, str);
}

int qtf_event_enable(struct qtf_instance* instance, const char* system, const char* event) {
  return tracefs_event_enable((struct tracefs_instance*)instance, system, event);
}

int qtf_event_disable_all(struct qtf_instance* instance) {
  return tracefs_event_disable((struct tracefs_instance*)instance, NULL, NULL);
}

int qtf_trace_on(struct qtf_instance* instance) {
  return tracefs_trace_on((struct tracefs_instance*)instance);
}

int qtf_trace_off(struct qtf_instance* instance) {
  return tracefs_trace_off((struct tracefs_instance*)instance);
}

/* The ring buffer's page header and the formats of the named events, nothing else:
 * tracefs_local_events_system() also parses every symbol of /proc/kallsyms (load_mappings),
 * which quiesce never prints - under ASan, whose realloc always copies, that parse alone took
 * 15 of a 16 s traced keygc run. */
struct qtf_events* qtf_events_load(const char* system, const char* const* names) {
  struct tep_handle* tep = tep_alloc();
  if (!tep) return NULL;
  int size = 0;
  char* buf = tracefs_instance_file_read(NULL, "events/header_page", &size);
  bool ok = buf && size > 0 && tep_parse_header_page(tep, buf, size, sizeof(long)) == 0;
  free(buf);
  for (; ok && *names; names++) {
    buf = tracefs_event_file_read(NULL, system, *names, "format", &size);
    ok = buf && size > 0 && tep_parse_event(tep, buf, size, system) == TEP_ERRNO__SUCCESS;
    free(buf);
  }
  if (!ok) {
    tep_free(tep);
    return NULL;
  }
  /* As tracefs_local_events_system() leaves it for tracefs_iterate_raw_events(). */
  tep_set_cpus(tep, (int)sysconf(_SC_NPROCESSORS_CONF));
  tep_set_long_size(tep, tep_get_header_page_size(tep));
  return (struct qtf_events*)tep;
}

void qtf_events_free(struct qtf_events* events) {
  tep_free((struct tep_handle*)events);
}

int qtf_event_id(struct qtf_events* events, const char* system, const char* name) {
  struct tep_event* e = tep_find_event_by_name((struct tep_handle*)events, system, name);
  return e ? e->id : -1;
}

struct read_context {
  const char* field;
  qtf_record_fn fn;
  void* context;
};

static int on_record(struct tep_event* event, struct tep_record* record, int cpu, void* arg) {
  struct read_context* c = arg;
  unsigned long long value = 0;
  if (tep_get_field_val(NULL, event, c->field, record, &value, 0) != 0) value = 0;
  c->fn(c->context, event->id, cpu, record->ts, value,
        record->missed_events > 0 ? record->missed_events : 0);
  return 0;
}

int qtf_read(struct qtf_events* events, struct qtf_instance* instance, const char* field,
             qtf_record_fn fn, void* context) {
  struct read_context c = {field, fn, context};
  return tracefs_iterate_raw_events((struct tep_handle*)events, (struct tracefs_instance*)instance,
                                    NULL, 0, on_record, &c);
}
