"""Component ids, in one place: callbacks and browser tests refer to these names."""

from __future__ import annotations

URL = "url"
PAGE = "page"
NAV = "nav"
SIGN_OUT = "sign-out"  # shown only where a session exists
SIGNED_IN_AS = "signed-in-as"  # who the reader is, where anybody is signed in

# Runs page
RUNS_TABLE = "runs-table"
RUNS_FILTER_PROJECT = "runs-filter-project"
RUNS_FILTER_LABEL = "runs-filter-label"
RUNS_FILTER_TEXT = "runs-filter-text"
RUNS_COMPARE_LINK = "runs-compare-link"
RUNS_REFRESH = "runs-refresh"
RUNS_STATUS = "runs-status"
RUNS_BUSY = "runs-busy"
RUNS_CURSORS = "runs-cursors"
RUNS_VERSION = "runs-version"
RUNS_PAGE_IDS = "runs-page-ids"
RUNS_OPEN_LINKS = "runs-open-links"
RUNS_TICKED = "runs-ticked"

# Run page
RUN_TITLE = "run-title"
RUN_SUBTITLE = "run-subtitle"
RUN_METRIC_MAP = "run-metric-map"
RUN_SAMPLER_ONLY = "run-sampler-only"
RUN_METRICS = "run-metrics"
RUN_SMOOTHING = "run-smoothing"
RUN_SMOOTH_WEIGHT = "run-smooth-weight"
RUN_YSCALE = "run-yscale"
RUN_XAXIS = "run-xaxis"
RUN_PANELS = "run-panels"
RUN_PAGE = "run-page"  # the run as the page opened it: never written by a callback
RUN_VIEW = "run-view"
RUN_ZOOM = "run-zoom"
RUN_LAST = "run-last"
RUN_INTERVAL = "run-interval"
RUN_ANNOTATIONS = "run-annotations"
RUN_CSV = "run-csv"
RUN_CSV_BUTTON = "run-csv-button"
RUN_FULL_CSV = "run-full-csv"
RUN_ALERTS = "run-alerts"
PANEL = "panel"  # pattern-matching type: {"type": PANEL, "index": group}

# Compare page
CMP_RUNS = "compare-runs"
CMP_REFERENCE = "compare-reference"
CMP_METRIC = "compare-metric"
CMP_SIGNAL_NOTE = "compare-signal-note"  # what the metric means, or that no signal is shared
CMP_MODE = "compare-mode"
CMP_BAND_K = "compare-band-k"
CMP_BAND_N = "compare-band-n"
CMP_GRAPH = "compare-graph"
CMP_DIVERGENCE = "compare-divergence"
CMP_CONFIG_DIFF = "compare-config-diff"
CMP_ALIGN = "compare-align"  # step / wall time from start / samples seen
CMP_COUNTER = "compare-counter"  # the counter metric "samples seen" reads
CMP_WINDOW = "compare-window"  # the step range a link zoomed the view to (an alert's)

# Buckets page
BKT_RUNS = "buckets-runs"
BKT_GROUP = "buckets-group"
BKT_GRAPH = "buckets-graph"
BKT_HEATMAP = "buckets-heatmap"
BKT_STEP_MIN = "buckets-step-min"
BKT_STEP_MAX = "buckets-step-max"

# Hardware page
HW_PROJECT = "hardware-project"
HW_GRAPH = "hardware-graph"
HW_BUCKETS = "hardware-buckets"
HW_TABLE = "hardware-table"
HW_RUNS = "hardware-runs"
HW_LABEL = "hardware-label"
HW_GROUP_BY = "hardware-group-by"
HW_METRIC = "hardware-metric"
HW_NOTE = "hardware-note"
HW_PAIRS = "hardware-pairs"
HW_RATIOS = "hardware-ratios"
HW_EXCLUDED = "hardware-excluded"
HW_REPORT_BUTTON = "hardware-report-button"
HW_REPORT = "hardware-report"
HW_EMPTY = "hardware-empty"  # what to run to make a comparison, when nothing can be compared
HW_BOX_SECTION = "hardware-box-section"
HW_GROUP_SECTION = "hardware-group-section"
HW_EXCLUDED_SECTION = "hardware-excluded-section"
CMP_HARDWARE_LINK = "compare-hardware-link"

# Parity page
PAR_RUNS = "parity-runs"
PAR_PHASE = "parity-phase"
PAR_DIFF = "parity-config-diff"
PAR_CONFIG = "parity-config"
PAR_METRICS = "parity-metrics"
PAR_SCATTER = "parity-scatter"
PAR_BUCKETS = "parity-buckets"
PAR_WORST = "parity-worst"
PAR_EMPTY = "parity-empty"  # the command that makes a report, when there is none
PAR_CONTROLS = "parity-controls"
PAR_CHARTS = "parity-charts"

# Run page: token exemplars (shown when the run logged them)
RUN_EXEMPLARS = "run-exemplars"
RUN_ATTRIBUTION = "run-attribution"
RUN_ATTRIBUTION_MISSING = "run-attribution-missing"
RUN_EX_STEP_MIN = "run-exemplars-step-min"
RUN_EX_STEP_MAX = "run-exemplars-step-max"
RUN_EX_SCATTER = "run-exemplars-scatter"
RUN_EX_TABLE = "run-exemplars-table"
RUN_EX_RUN = "run-exemplars-run"

# Activity page
ACT_PROJECT = "activity-project"
ACT_KIND = "activity-kind"
ACT_LAST = "activity-last"
ACT_RECENT = "activity-recent"
ACT_POLL = "activity-poll"

# Alerts page
ALERTS_PROJECT = "alerts-project"
ALERTS_SEVERITY = "alerts-severity"
ALERTS_STATE = "alerts-state"
ALERTS_LABEL = "alerts-label"
ALERTS_STATUS = "alerts-status"
ALERTS_LIST = "alerts-list"  # the empty state, when nothing is listed
ALERTS_TABLE = "alerts-table"
ALERTS_EMPTY = "alerts-empty"
ALERTS_POLL = "alerts-poll"
ALERTS_ACK = "alerts-ack"  # acknowledges the incidents of the selected rows
ALERTS_ACK_COMMENT = "alerts-ack-comment"
ALERTS_ACK_RESULT = "alerts-ack-result"
ALERTS_DONE = "alerts-done"

# Incident page
INC_HEADER = "incident-header"
INC_CONTEXT = "incident-context"
INC_ALERTS = "incident-alerts"
INC_TIMELINE = "incident-timeline"
INC_SILENCES = "incident-silences"
INC_ACK = "incident-ack"
INC_ACK_COMMENT = "incident-ack-comment"
INC_DURATION = "incident-duration"
INC_SILENCE_RUN = "incident-silence-run"
INC_SILENCE_RULE = "incident-silence-rule"
INC_SILENCE_LABEL = "incident-silence-label"
INC_LABEL = "incident-label"
INC_SILENCE_END = "incident-silence-end"  # pattern-matching type: {"type": …, "index": silence}
INC_RESULT = "incident-result"
INC_DONE = "incident-done"
INC_POLL = "incident-poll"

# Run page: its alerts under the charts
RUN_ALERT_LIST = "run-alert-list"

# Rules page
RULES_PROJECT = "rules-project"
RULES_TABLE = "rules-table"
RULES_REASON = "rules-reason"
RULES_SELECTED = "rules-selected"  # the chosen rule: {"id", "enabled"}
RULES_PARAMS = "rules-params"
RULES_RUN = "rules-run"
RULES_PREVIEW = "rules-preview"
RULES_PREVIEW_GRAPH = "rules-preview-graph"
RULES_PREVIEW_NOTE = "rules-preview-note"
RULES_SAVE = "rules-save"
RULES_TOGGLE = "rules-toggle"
RULES_RESULT = "rules-result"
RULES_DONE = "rules-done"
