"""Input required (2026-07-28) with and without an idempotencyKey: the answer to the leg that
charges, lost for real, on two instances of the 2.x ledger server that share one store (P25).

    sep3182-confirm-demo                      on one SQLite file
    sep3182-confirm-demo --store postgresql://USER@HOST:PORT/DB   the same on PostgreSQL
    sep3182-confirm-demo --server SCRIPT      against another server script (the tests' stand-ins)

`charge_confirmed` asks the user before it charges: its first leg answers an InputRequiredResult,
a question and a requestState; the continuation, the same call with the user's answer
(`inputResponses`) and the echoed `requestState`, charges. `charge_deferred` answers the other
form, a `requestState` alone, and its continuation carries that state alone. The client is the
SDK's own (mcp 2.x, 2026-07-28), which drives the exchange itself here, since Client.call_tool
has no room for a key. It sends both legs to instance A, whose answer to the charging leg the
harness's link loses after A sent it; the client times out and sends the very same continuation
again, with a new JSON-RPC id, to instance B. The instances share the store and the secret that
seals `requestState` (--request-state-key-file), so that B can verify what A sealed, as any
instance must for a continuation that lands on it. Every verdict is read from the ledger.
"""

import secrets
import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from mcp_idempotency.keyed_call import KeyedCall, KeyedCallParams

from .cluster_demo import Cluster, Instance, paid
from .harness import (
    LOST_RESPONSE_TIMEOUT,
    RESPONSE_TIMEOUT,
    TIMED_OUT,
    call_tool,
    new_key,
    play_on_a_shared_store,
    say,
    short,
    text,
    verdict,
)

# What a tools/call may answer on 2026-07-28 without a task: the result, or the input it needs first.
LEG_RESULT: TypeAdapter[types.CallToolResult | types.InputRequiredResult] = TypeAdapter(
    types.CallToolResult | types.InputRequiredResult
)
AMOUNT = 100


async def the_user(_context: Any, question: types.ElicitRequestParams) -> types.ElicitResult:
    """The person at the client, who says yes to "Charge 100?". Given to the Client as its elicitation
    callback, it also declares the capability without which the server must not ask (2026-07-28)."""
    say("user", f"is asked {question.message!r} and says yes")
    return types.ElicitResult(action="accept", content={"confirm": True})


def leg(tool: str, key: str | None, first_leg: types.InputRequiredResult | None = None, answers=None) -> KeyedCall:
    """One leg of the exchange: the first, or the continuation of `first_leg` with the user's `answers`."""
    state = None if first_leg is None else first_leg.request_state
    params = KeyedCallParams(
        name=tool, arguments={"amount": AMOUNT}, idempotency_key=key, input_responses=answers, request_state=state
    )
    return KeyedCall(params=params)


async def answers_to(first_leg: types.InputRequiredResult) -> dict[str, types.ElicitResult] | None:
    """The user's answer to each question the first leg asked; None when it asked none (the state-only form)."""
    if not first_leg.input_requests:
        say("client", "nothing is asked: the client sends the call again at once, with the state")
        return None
    return {name: await the_user(None, asked.params) for name, asked in first_leg.input_requests.items()}


async def send(to: Instance, request: KeyedCall, lose: bool = False):
    """Send one leg to `to`; its answer, the MCPError it was refused with, or None if none came in time.
    `lose`: the link loses the answer, after the server sent it."""
    if lose:
        to.link.lose_next_response()
    timeout = LOST_RESPONSE_TIMEOUT if lose else RESPONSE_TIMEOUT
    try:
        answer = await to.client.session.send_request(request, LEG_RESULT, request_read_timeout_seconds=timeout)
    except MCPError as error:
        if error.code == TIMED_OUT:
            say("client", f"no answer from {to.name} within {timeout}s")
            return None
        say("client", f"← {to.name}: error {error.code}: {error.message}")
        return error
    if isinstance(answer, types.InputRequiredResult):
        asked = ", ".join(answer.input_requests or {}) or "nothing"
        say("client", f"← {to.name}: input_required, asks for {asked}, requestState {answer.request_state[:12]}…")
    else:
        say("client", f"← {to.name}: {text(answer)}")
    return answer


# ----------------------------------------------------------------------------
# The scenarios
# ----------------------------------------------------------------------------


async def lost_charging_leg(
    a: Instance, b: Instance, tool: str, key: str | None
) -> tuple[dict | None, dict | None, dict]:
    """Both legs to A, the charging leg's answer lost, the continuation sent again to B: what A sent, what B
    answered (as it came off the wire), and the ledger."""
    await call_tool(a.client, "reset_ledger", {})
    say("client", f"sends {tool}(amount={AMOUNT})" + (f", key {short(key)}" if key else ", no key") + ", to A")
    first_leg = await send(a, leg(tool, key))
    if not isinstance(first_leg, types.InputRequiredResult):
        raise RuntimeError(f"A did not ask for input first: {first_leg}")
    continuation = leg(tool, key, first_leg, await answers_to(first_leg))
    say("client", "sends the continuation, the leg that charges, to A")
    await send(a, continuation, lose=True)
    say("client", "sends the very same continuation again, with a new JSON-RPC id, to B; on the wire:")
    b.link.show_calls = True  # exactly what the client sends on the retry
    retried = await send(b, continuation)
    b.link.show_calls = False
    answered = b.link.delivered_result if isinstance(retried, types.CallToolResult) else None
    return a.link.lost_result, answered, await paid(b)


async def without_a_key(a: Instance, b: Instance) -> bool:
    """Scenario 1: no key; the charging leg's answer is lost and it is sent again: two charges."""
    print("1. No key: the answer to the confirmed charge is lost, the continuation sent again to B: two charges")
    lost, _, truth = await lost_charging_leg(a, b, "charge_confirmed", None)
    return verdict(
        lost is not None and truth == {"balance": 2 * AMOUNT, "charges": 2},
        "charged twice: without a key nothing tells the retried continuation from the first one",
    )


async def with_a_key(a: Instance, b: Instance, tool: str, form: str) -> bool:
    """Scenarios 2 and 3: the same loss under a key: B replays the charging leg's recorded outcome (P25)."""
    key = new_key()
    say("client", f"mints idempotencyKey {key} once, for the call and every leg that continues it")
    lost, answered, truth = await lost_charging_leg(a, b, tool, key)
    same = lost is not None and lost == answered
    say("client", "the lost answer and B's compared whole: " + ("identical" if same else "NOT identical"))
    return verdict(
        same and truth == {"balance": AMOUNT, "charges": 1},
        f"one charge: the {form} was never kept, the charging leg was, and B replayed it",
    )


async def play(store: str | None, server: list[str]) -> bool:
    """Start two instances on one store and one state key, play the three scenarios; True if all passed."""
    print("SEP-3182 and input required (2026-07-28): the answer to the leg that charges is lost\n")
    with tempfile.TemporaryDirectory() as folder:
        key_file = Path(folder) / "state.key"
        key_file.write_text(secrets.token_hex(32))  # the secret both instances seal requestState with
        store = store or f"sqlite:{folder}/store.db"
        async with anyio.create_task_group() as connections:
            cluster = Cluster(Path(folder), store, server, connections)
            a, b = [
                await cluster.start(name, "--request-state-key-file", str(key_file), elicitation_callback=the_user)
                for name in ("A", "B")
            ]
            shown = await without_a_key(a, b)
            print("2. With an idempotencyKey on the call and its continuation: the same loss, B replays")
            held = [await with_a_key(a, b, "charge_confirmed", "question")]
            print("3. The form with only a requestState (charge_deferred), under a key: the same loss, B replays")
            held.append(await with_a_key(a, b, "charge_deferred", "deferral"))
            cluster.stop()
    print(
        "3 scenarios: without a key the lost answer "
        f"{'cost a second charge, as it must' if shown else 'did NOT cost a second charge'}; with the key on "
        f"every leg (P25), {sum(held)} of {len(held)} charged once."
    )
    return shown and all(held)


def main() -> None:
    """Parse the options, play, and exit 0 only if every scenario passed."""
    play_on_a_shared_store(play, __doc__ or "")


if __name__ == "__main__":
    main()
