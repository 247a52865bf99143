"""The stand-ins (tests/stand_ins/): each one's script, the checks of the kit its one broken rule makes fall short
(FAILURE or WARNING), and the switch a script that serves several is started with. tests/kit_targets.py runs them."""

# advertises_otherwise.py --capability each (and no-object)
MISSTATED_SETTINGS = ("a-fractional-window", "a-longer-key-than-it-takes", "a-shorter-key-than-it-takes", "no-window")
REJECTIONS = ("conflict", "invalid-key", "in-progress", "store-full")  # drops_retryable.py --of each
NO_DEDUPLICATION = {
    "repeat-executes-once",
    "replay-not-refreshed",
    "error-outcome-recorded",
    "conflict-leaves-the-record",
    "read-only-tool-deduplicated",
    "conflict-rejected",
    "conflict-error-data",
    "error-code",
    "equivalence-serialisation",
    "equivalence-numbers",
    "equivalence-strings",
    "equivalence-meta-ignored",
    "equivalence-absent-arguments",
    "different-requests-conflict",
    "equivalence-null-member",
    "large-integers-exact",
    "odd-keys-are-keys",
    "invalid-key-rejected",
    "in-flight-duplicate-not-executed",
    "in-flight-duplicate-rejected-at-once",
    "in-progress-error-data",
    "conflict-while-running",
    "cancelled-call-runs-once",
    "retention-window",
    "store-bound",
    "malformed-input-survived",
    "capability-settings",
    "live-run-never-taken-over",
    "in-progress-ends-by-the-deadline",
}
# Every check that provokes a conflict and looks for one, where a server answers it otherwise
NO_CONFLICT = {
    "conflict-rejected",
    "conflict-error-data",
    "error-code",
    "error-outcome-recorded",
    "different-requests-conflict",
    "equivalence-null-member",
    "large-integers-exact",
    "conflict-while-running",
    "live-run-never-taken-over",
    "in-progress-ends-by-the-deadline",  # it asks that the stopped run's key be a conflict under other arguments
}
# Every check that compares a replayed outcome with its original (but store-bound, whose store a full run has filled)
NO_SAME_REPLAY = {
    "error-outcome-recorded",
    "repeat-executes-once",
    "replay-not-refreshed",
    "conflict-leaves-the-record",
    "read-only-tool-deduplicated",
    "equivalence-serialisation",
    "equivalence-numbers",
    "equivalence-strings",
    "equivalence-meta-ignored",
    "equivalence-absent-arguments",
    "odd-keys-are-keys",
    "retention-window",
    "malformed-input-survived",
    "live-run-never-taken-over",
}
# name -> (its script, the checks its one broken rule makes fall short: FAILURE or WARNING)
STAND_INS = {
    "ignores-the-key": ("ignores_the_key.py", NO_DEDUPLICATION),
    "replays-a-conflict": ("replays_a_conflict.py", NO_CONFLICT),
    "queues-in-flight-duplicates": (
        "queues_in_flight_duplicates.py",
        {
            "in-flight-duplicate-rejected-at-once",
            "in-progress-error-data",
            "cancelled-call-runs-once",
            "live-run-never-taken-over",
        },
    ),
    "drops-the-capability": ("drops_the_capability.py", {"capability-declared"}),
    "records-its-own-rejections": (
        "records_its_own_rejections.py",
        # its in-progress rejection, recorded, answers the key past its deadline too
        {
            "conflict-leaves-the-record",
            "cancelled-call-runs-once",
            "live-run-never-taken-over",
            "in-progress-ends-by-the-deadline",
        },
    ),
    "shares-keys-across-principals": (
        "shares_keys_across_principals.py",
        {"key-scoped-to-principal", "other-principals-key-no-conflict", "other-principals-key-not-in-progress"},
    ),
    "takes-a-null-key-as-a-key": ("takes_a_null_key_as_a_key.py", {"no-key-runs-every-time"}),
    "examines-the-key-on-every-method": ("examines_the_key_on_every_method.py", {"other-methods-ignore-the-key"}),
    "replays-without-rechecking-scope": ("replays_without_rechecking_scope.py", {"replay-rechecks-authorisation"}),
    "echoes-an-oversized-key": ("echoes_an_oversized_key.py", {"oversized-key-not-echoed", "invalid-key-rejected"}),
    "ignores-the-tool-name": ("ignores_the_tool_name.py", {"different-requests-conflict"}),
    "refuses-keys-that-are-not-plain-ascii": ("refuses_keys_that_are_not_plain_ascii.py", {"odd-keys-are-keys"}),
    "runs-in-flight-duplicates": (
        "runs_in_flight_duplicates.py",
        {
            "in-flight-duplicate-not-executed",
            "in-flight-duplicate-rejected-at-once",
            "in-progress-error-data",
            "cancelled-call-runs-once",
            "live-run-never-taken-over",
            "in-progress-ends-by-the-deadline",
        },
    ),
    "never-forgets-a-key": ("never_forgets_a_key.py", {"retention-window"}),
    "compares-meta-too": ("compares_meta_too.py", {"equivalence-meta-ignored"}),
    "compares-numbers-as-spelled": ("compares_numbers_as_spelled.py", {"equivalence-numbers"}),
    # equivalence-numbers' nested row also spells {"x", "y"} in the other order
    "compares-members-in-order": (
        "compares_members_in_order.py",
        {"equivalence-serialisation", "equivalence-numbers"},
    ),
    # Issue 25's four decisions, each broken on the layer, which meets all four (a longer key advertised: below).
    "drops-retryable": ("drops_retryable.py", {"rejection-retryable"}),
    "compares-integers-as-doubles": ("compares_integers_as_doubles.py", {"large-integers-exact"}),
    # A live run taken over once its lease passes.
    "never-renews-its-lease": ("never_renews_its_lease.py", {"live-run-never-taken-over"}),
    "never-ends-a-hung-run": ("never_ends_a_hung_run.py", {"in-progress-ends-by-the-deadline"}),
    "gives-back-a-hung-runs-key": ("gives_back_a_hung_runs_key.py", {"in-progress-ends-by-the-deadline"}),
    # Issue 26: one principal may fill the whole store.
    "bounds-only-the-whole-store": ("bounds_only_the_whole_store.py", {"share-per-principal"}),
    # Issue 24: a lost task handle, an input-required answer, the key's placement, a closed SSE stream.
    "makes-a-task-per-call": ("makes_a_task_per_call.py", {"task-handle-replayed"}),
    "keeps-the-question": ("keeps_the_question.py", {"input-required-never-replayed"}),
    "reads-the-key-in-both-places": ("reads_the_key_in_both_places.py", {"key-only-in-params"}),
    "reads-the-key-in-both-places-meta": ("reads_the_key_in_both_places.py", {"key-only-in-params"}),
    "stops-its-run-when-the-stream-closes": ("stops_its_run_when_the_stream_closes.py", {"cancelled-call-runs-once"}),
    # Issue 34: a stand-in per assertion of a check that has several, most of them a switch of one script (SWITCHED).
    "advertises-no-object": ("advertises_otherwise.py", {"capability-declared"}),
    **{f"advertises-{wrong}": ("advertises_otherwise.py", {"capability-settings"}) for wrong in MISSTATED_SETTINGS},
    "runs-the-invalid-keys-it-refuses": ("runs_what_it_refuses.py", {"capability-settings", "invalid-key-rejected"}),
    # The kit asks "ran nothing" of each conflict it provokes, so every check that provokes one falls short.
    # (Its refusal is the layer's own, so the checks of a conflict's shape pass.)
    "runs-the-conflicts-it-refuses": (
        "runs_what_it_refuses.py",
        NO_CONFLICT - {"conflict-error-data", "error-code", "in-progress-ends-by-the-deadline"},
    ),
    "answers-a-conflict-as-a-tool-error": ("answers_a_conflict_as_a_tool_error.py", NO_CONFLICT),
    "marks-its-replays": ("marks_its_replays.py", NO_SAME_REPLAY),
    "ends-its-window-a-second-early": ("ends_its_window_a_second_early.py", {"retention-window"}),
    **{f"drops-retryable-of-{kind}": ("drops_retryable.py", {"rejection-retryable"}) for kind in REJECTIONS},
    # The acknowledgement (P33), in the extension's placement (kit_targets.SERVED): none on any answer, or a replay
    # that does not carry it as the first answer did, which no replay-comparing check then takes for the same result.
    "drops-the-acknowledgement": ("drops_the_acknowledgement.py", {"result-acknowledged"}),
    "drops-the-acknowledgement-from-replays": (
        "drops_the_acknowledgement.py",
        {"result-acknowledged", *NO_SAME_REPLAY},
    ),
}
# The stand-ins started with a switch of their script: the switch.
SWITCHED = {
    **{f"advertises-{wrong}": ["--capability", wrong] for wrong in ("no-object", *MISSTATED_SETTINGS)},
    **{f"runs-the-{refused}-it-refuses": ["--refuses", refused] for refused in ("invalid-keys", "conflicts")},
    **{f"drops-retryable-of-{kind}": ["--of", kind] for kind in REJECTIONS},
}
