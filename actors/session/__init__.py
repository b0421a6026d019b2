"""The session: its actor and the pure policies that decide each request.

`actor` is the session actor, written as a chain of layers: `core` (state,
persist then apply, ending a turn), `compacting`, `turn_loop` (the loop
itself), with its `messages`, its `runtime` (what the host gives it), its
`inflight` bookkeeping, and `tool_calls` (running the host's executor).
`stream` is the client's handle on a turn; `settings` what a new session
starts with.

Policies, one concept each, all I/O-free and clock-free (time is an argument):
`tokens` (T), `profile` (P2), `tool_budget` (X), `view` (the model-visible
history, kept incrementally), `tracker` (P), `budget` (B), `handoff` (H),
`slimming` (S), `request` (assembly), `turn` (the events of each step of
a turn, the verdict on a provider error, interrupted turns) and `recovery`
(how reactive recovery shrinks the context, R3). Before every provider
request the actor calls them in the order of CONTEXT-RULES L1:

1. `occupancy`; `plan_micro` when due: persist its event, apply, re-measure;
2. `plan_snip` on the result (not applied yet);
3. below `compaction_due` (or `unknown`): persist and apply the snip plan;
4. at `compaction_due`: compact `apply_plan(state, snip)` (hand-off stripped),
   persist the checkpoint, then swap;
5. re-measure; in `handoff_band`, `decide_handoff`: persist and apply it;
6. `assemble`, persist `request_event(...)`, then send the messages.
"""
