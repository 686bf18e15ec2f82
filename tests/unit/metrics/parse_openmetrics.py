# SPDX-License-Identifier: Apache-2.0
# Parses an OpenMetrics text file with prometheus_client's strict OpenMetrics parser (the
# reference implementation's: it rejects a missing "# EOF", counters without _total,
# unordered or non-cumulative buckets, a histogram without +Inf, bad escapes, interleaved
# families...) and prints the families as JSON: {name: {"type", "samples": [{"name",
# "labels", "value"}]}}. Exit 1 with the parser's message if the text is not valid.
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

try:
    text = open(sys.argv[1], encoding="utf-8").read()
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = {
            "type": family.type,
            "samples": [{"name": s.name, "labels": s.labels, "value": s.value}
                        for s in family.samples],
        }
except Exception as e:  # the parser raises ValueError and others on invalid input
    print(f"invalid OpenMetrics: {e}", file=sys.stderr)
    sys.exit(1)
json.dump(families, sys.stdout)
