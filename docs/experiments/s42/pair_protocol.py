"""The paired dK/dV prototype's dQ exchange as a protocol, run under random schedules on the CPU.

Why: a device call costs minutes that often do not come, and a hang or a buffer overwritten early shows up there
only as a timeout or a wrong gradient. This models what docs/experiments/s42/bwd-paired-consumer-add.patch does
between the two CTAs of a cluster, for ADD_AT 1 (pa, pb: measured right on the H100), 2 (pf) and 3 (pn), with
SEND 0 (st.async), and reports any deadlock, early overwrite or barrier misuse.

Per CTA r (partner p = 1 - r) three actors, each one thread of its group:
  - RC, consumer `rank` (the receiving consumer), which stages its share in sdQ and, ADD_AT 1 or 2, adds the
    partner's share of its columns from `recv`;
  - SC, the other consumer, which stores its share into the partner's `recv` (st.async: bytes counted on the
    partner's recv_full) once its own send_ok says the partner has used the last one;
  - W, the dQ writer warp, which reduces the finished half of sdQ and arrives on the partner's send_ok.
RC and SC of a CTA meet once per step (the DS_READY exchange of dS^T halves) before the dQ point. A producer per
CTA fills a step's stage (of STAGES) once the consumers have released the step STAGES before it; with the
multicast (pfr, pbr) rank 0's Q and rank 1's dO land in both CTAs, so a stage needs both producers, and a producer
waits for the consumers of both CTAs.

The barriers as the hardware keeps them:
  - a named barrier (bar.sync / bar.arrive) completes when RC's and W's threads have arrived; a party arriving
    again before it completes is misuse (its threads would be counted twice), and so is one left half arrived
    at the end;
  - an mbarrier has a phase, pending arrivals and a transaction count; a wait on parity P passes while the
    current (incomplete) phase's parity differs from P; an arrival with none pending is misuse.

Usage: python3 docs/experiments/s42/pair_protocol.py [schedules]   (default 3000 per variant and step count)
"""

from __future__ import annotations

import random
import sys


STAGES = 2  # the dK/dV kernel's Q / dO pipeline at head dim 128


class Misuse(Exception):
    pass


class NamedBarrier:
    def __init__(self, name):
        self.name, self.arrived, self.generation = name, set(), 0

    def arrive(self, party):
        if party in self.arrived:
            raise Misuse(f"{party} arrived twice on {self.name} before it completed")
        self.arrived.add(party)
        if len(self.arrived) == 2:
            self.arrived.clear()
            self.generation += 1


class MBarrier:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.tx, self.phase = name, count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, expect_bytes=0):
        if self.pending == 0:
            raise Misuse(f"arrival on {self.name} with none pending")
        self.pending -= 1
        self.tx += expect_bytes
        self._maybe_complete()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._maybe_complete()

    def passed(self, parity):
        return self.phase % 2 != parity


def simulate(add_at: int, steps: int, rng: random.Random, mutant: str = "", multicast: bool = False) -> str | None:
    """One random schedule; None if it ran to the end cleanly, else what went wrong. `mutant` breaks one rule
    of the protocol on purpose (MUTANTS), to show that the checks catch it."""
    recv_full = [MBarrier(f"recv_full[{r}]", 1) for r in range(2)]
    send_ok = [MBarrier(f"send_ok[{r}]", 1) for r in range(2)]
    full = [NamedBarrier(f"DQ_FULL[{r}]") for r in range(2)]
    empty = [[NamedBarrier(f"DQ_EMPTY[{r}]"), NamedBarrier(f"DQ_EMPTY_ODD[{r}]")] for r in range(2)]
    if mutant == "one empty barrier":
        empty = [[e[0], e[0]] for e in empty]
    ds_reached = [[-1, -1] for _ in range(2)]  # per CTA, per consumer (0 RC, 1 SC): the last step's meeting point
    recv = [None, None]       # which step's partner share lies in recv[r], and whether RC has read it
    recv_read = [True, True]
    halves = [[None, None] for _ in range(2)]  # sdQ half: (state, step) with state staged / summed / reduced
    writer_reduced = [[] for _ in range(2)]
    produced = [-1, -1]                  # per CTA: the last step its producer has filled
    released = [[-1, -1] for _ in range(2)]  # per CTA, per consumer: the last step it has released

    def producer(r):
        for s in range(steps):
            ctas = (0, 1) if multicast else (r,)  # the CTAs whose stage s % STAGES this copy writes
            waits_for = (r,) if mutant == "multicast waits for its own CTA" else ctas
            yield from wait(lambda: all(released[x][c] >= s - STAGES for x in waits_for for c in (0, 1)))
            if any(released[x][c] < s - STAGES for x in ctas for c in (0, 1)):
                raise Misuse(f"producer {r} step {s}: a consumer still reads step {s - STAGES}'s stage")
            produced[r] = s

    def step_inputs(r, s):
        yield from wait(lambda: min(produced) >= s if multicast else produced[r] >= s)

    def sync(barrier, party):
        arrived_in = barrier.generation
        barrier.arrive(party)
        while barrier.generation == arrived_in:  # until the instance this arrival belongs to completes
            yield

    def wait(predicate):
        while not predicate():
            yield

    def meet(r, c, s):
        ds_reached[r][c] = s
        yield from wait(lambda: ds_reached[r][1 - c] >= s)

    def take_share(r, t):
        """CTA r's RC (ADD_AT 3: its W) reads the partner's share of step t from recv, after waiting on recv_full."""
        recv_full[r].arrive(expect_bytes=1)  # thread 0's arrive.expect_tx, the phase's one arrival
        yield from wait(lambda: recv_full[r].passed(t & 1))
        if recv[r] != t or recv_read[r]:
            raise Misuse(f"CTA {r} step {t}: recv holds step {recv[r]} (read: {recv_read[r]})")
        recv_read[r] = True

    def half_check(r, b, expect):
        if halves[r][b] != expect:
            raise Misuse(f"CTA {r} sdQ half {b}: {halves[r][b]}, expected {expect}")

    def receiving_consumer(r):
        if add_at == 2:
            for s in range(steps):
                yield from step_inputs(r, s)
                if s > 0:
                    yield from finish(r, s - 1)
                yield from meet(r, 0, s)
                if s >= 2 and mutant != "stage without DQ_EMPTY":
                    yield from sync(empty[r][s & 1], "RC")
                half_check(r, s & 1, ("reduced", s - 2) if s >= 2 else None)  # what step s - 2 left, read
                halves[r][s & 1] = ("staged", s)
                released[r][0] = s
            if steps and mutant != "no drain":
                yield from finish(r, steps - 1)
                for s in (steps, steps + 1):
                    if s >= 2:
                        yield from sync(empty[r][s & 1], "RC")
        else:
            for s in range(steps):
                yield from step_inputs(r, s)
                yield from meet(r, 0, s)
                if add_at == 1:
                    yield from take_share(r, s)
                yield from sync(empty[r][0], "RC")
                if s > 0:
                    half_check(r, 0, ("reduced", s - 1))
                halves[r][0] = ("summed" if add_at == 1 else "staged", s)
                full[r].arrive("RC")
                released[r][0] = s

    def finish(r, t):
        yield from take_share(r, t)
        half_check(r, t & 1, ("staged", t))
        halves[r][t & 1] = ("summed", t)
        full[r].arrive("RC")

    def sending_consumer(r):
        p = 1 - r
        for s in range(steps):
            yield from step_inputs(r, s)
            yield from meet(r, 1, s)
            if mutant != "send without send_ok":
                yield from wait(lambda: send_ok[r].passed((s & 1) ^ 1))
            if not recv_read[p]:
                raise Misuse(f"CTA {r} step {s}: the partner's recv (step {recv[p]}) is not read yet")
            recv[p], recv_read[p] = s, False
            recv_full[p].complete_tx(1)
            released[r][1] = s

    def writer(r):
        p = 1 - r
        for t in range(steps):
            if add_at != 2:
                empty[r][0].arrive("W")
            yield from sync(full[r], "W")
            b = t & 1 if add_at == 2 else 0
            if add_at == 3:
                yield from take_share(r, t)  # (the writer's wait, with nothing added)
                half_check(r, b, ("staged", t))
            else:
                half_check(r, b, ("summed", t))
            send_ok[p].arrive()
            halves[r][b] = ("reduced", t)
            writer_reduced[r].append(t)
            if add_at == 2:
                empty[r][t & 1].arrive("W")

    actors = {}
    for r in range(2):
        actors[f"RC{r}"] = receiving_consumer(r)
        actors[f"SC{r}"] = sending_consumer(r)
        actors[f"W{r}"] = writer(r)
        actors[f"P{r}"] = producer(r)
    try:
        while actors:
            # every actor may run one atomic stretch (up to its next wait); pick one at random, and only call
            # it stuck when a full round over all of them moved nothing
            progressed = False
            for name in rng.sample(list(actors), len(actors)):
                state_before = _snapshot(recv_full, send_ok, full, empty, ds_reached, recv, halves, produced, released)
                try:
                    next(actors[name])
                except StopIteration:
                    del actors[name]
                    progressed = True
                    break
                if _snapshot(recv_full, send_ok, full, empty, ds_reached, recv, halves, produced, released) != state_before:
                    progressed = True
                    break
            if not progressed:
                return f"deadlock: {sorted(actors)} wait"
        for r in range(2):
            if writer_reduced[r] != list(range(steps)):
                return f"CTA {r} reduced {writer_reduced[r]}"
            for barrier in [full[r], *empty[r]]:
                if barrier.arrived:
                    return f"{barrier.name} left half arrived by {barrier.arrived}"
    except Misuse as error:
        return str(error)
    return None


def _snapshot(*parts):
    out = []
    for part in parts:
        out.append(repr([_state(x) for x in part]) if isinstance(part, list) else repr(part))
    return tuple(out)


def _state(x):
    if isinstance(x, list):
        return [_state(y) for y in x]
    if isinstance(x, NamedBarrier):
        return (sorted(x.arrived), x.generation)
    if isinstance(x, MBarrier):
        return (x.pending, x.tx, x.phase)
    return x


MUTANTS = ("one empty barrier", "stage without DQ_EMPTY", "no drain", "send without send_ok",
           "multicast waits for its own CTA")


def main(schedules: int) -> int:
    failures = 0
    for mutant in MUTANTS:  # each must be caught, or the checks below say nothing
        rng = random.Random(7)
        caught = sum(bool(simulate(2, steps, rng, mutant, multicast=True)) for steps in range(1, 7) for _ in range(200))
        failures += not caught
        print(f"mutant '{mutant}' (ADD_AT 2, multicast): caught in {caught} of 1200 schedules")
    for add_at, multicast in ((1, False), (1, True), (2, False), (2, True), (3, False)):
        for steps in range(0, 7):
            rng = random.Random(1000 * add_at + 100 * multicast + steps)
            problems = {}
            for _ in range(schedules):
                problem = simulate(add_at, steps, rng, multicast=multicast)
                if problem:
                    problems[problem] = problems.get(problem, 0) + 1
            status = "ok" if not problems else "; ".join(f"{n}x {p}" for p, n in problems.items())
            failures += bool(problems)
            print(f"ADD_AT {add_at}{', multicast' if multicast else ''}, {steps} steps, {schedules} schedules: {status}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
