// SPDX-License-Identifier: Apache-2.0
/* The few libtracefs calls kernel_trace.cpp makes, behind a C interface: tracefs.h is a C
 * header whose inline functions do not compile as C++ (an int passed as an enum), so it is
 * included only by tracefs_shim.c. Each function is the libtracefs one of the same name
 * without the qtf_ prefix (see tracefs(3)); instances and event tables are opaque. */
#ifndef QUIESCE_HOST_TRACEFS_SHIM_H
#define QUIESCE_HOST_TRACEFS_SHIM_H

#ifdef __cplusplus
extern "C" {
#endif

struct qtf_instance;
struct qtf_events;

const char* qtf_tracing_dir(void);
/* tracefs_set_tracing_dir: the directory every later call uses; 0 on success. */
int qtf_set_tracing_dir(const char* dir);

struct qtf_instance* qtf_instance_create(const char* name);
void qtf_instance_free(struct qtf_instance* instance);
int qtf_instance_file_write(struct qtf_instance* instance, const char* file, const char* str);
int qtf_event_file_write(struct qtf_instance* instance, const char* system, const char* event,
                         const char* file, const char* str);
int qtf_event_enable(struct qtf_instance* instance, const char* system, const char* event);
int qtf_event_disable_all(struct qtf_instance* instance);
int qtf_trace_on(struct qtf_instance* instance);
int qtf_trace_off(struct qtf_instance* instance);

/* The formats of the events `names` (NULL-terminated) of one event system; NULL if one is
 * missing or unreadable. */
struct qtf_events* qtf_events_load(const char* system, const char* const* names);
void qtf_events_free(struct qtf_events* events);
/* The id of system:name, -1 if absent. */
int qtf_event_id(struct qtf_events* events, const char* system, const char* name);

/* Reads (consumes) every recorded event of the instance (tracefs_iterate_raw_events) and
 * calls `fn` for each with its event id, CPU, timestamp, the value of the numeric field
 * `field` (0 if the event has none) and the events the kernel dropped before it. */
typedef void (*qtf_record_fn)(void* context, int event_id, int cpu, unsigned long long ts,
                              unsigned long long field, long long missed);
int qtf_read(struct qtf_events* events, struct qtf_instance* instance, const char* field,
             qtf_record_fn fn, void* context);

#ifdef __cplusplus
}
#endif

#endif
