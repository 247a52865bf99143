/**
 * The idempotency scenario's behaviour checks: each calls the fixture tools
 * of a server that declares the extension, and returns one check. Each mints
 * its own keys and counts the charges it caused as a difference of the
 * count, so none depends on what another left behind on the server.
 */

import type { ConformanceCheck } from '../../types';
import { JsonRpcError, type Connection } from '../../connection';
import {
  ACKNOWLEDGED,
  CHARGE_TOOL,
  CONFLICT,
  COUNT_TOOL,
  ELSEWHERE,
  FAILURE_RECORDED,
  IDEMPOTENCY_KEY_META,
  INTEGERS,
  INVALID_KEY,
  INVALID_PARAMS,
  IN_PROGRESS,
  NO_KEY,
  PAST_DOUBLE,
  READ_ONLY,
  REPEAT,
  ROUNDED,
  SETTLE_MS,
  SLOW_SECONDS,
  UNKNOWN_TOOL,
  acknowledgementOf,
  acknowledgementProblem,
  callTool,
  charge,
  chargeCount,
  check,
  exactInteger,
  newKey,
  outcomeOf,
  rejectionProblem,
  sameOutcome,
  succeeded
} from './idempotency-helpers';

/**
 * A repeat of a finished call gets the recorded outcome, and the tool runs
 * once. A charge without a key runs between the two, so the count the first
 * answer reports is no longer the current one: the replay is the outcome as
 * recorded, not refreshed against the current state.
 */
export async function repeatReplaysOutcome(
  conn: Connection
): Promise<ConformanceCheck> {
  const key = newKey();
  const before = await chargeCount(conn);
  const first = await charge(conn, 100, key);
  const between = await charge(conn, 100);
  const repeat = await charge(conn, 100, key);
  const ran = (await chargeCount(conn)) - before - 1; // less the unkeyed charge
  const errors: string[] = [];
  if (!succeeded(first))
    errors.push(`the keyed charge failed: ${JSON.stringify(outcomeOf(first))}`);
  if (!sameOutcome(first, repeat)) {
    errors.push(
      `the repeat MUST get the outcome as it was recorded, ${JSON.stringify(outcomeOf(first))}, even after another charge changed the count; got ${JSON.stringify(outcomeOf(repeat))}`
    );
  }
  if (!succeeded(between))
    errors.push(
      `the charge without a key failed: ${JSON.stringify(outcomeOf(between))}`
    );
  if (ran !== 1)
    errors.push(`the tool MUST run once for the key; it ran ${ran} times`);
  return check(REPEAT, errors, { ran });
}

/**
 * The key with other arguments is a conflict, and the tool does not run with
 * them. The rejection is not recorded: the first request sent again still
 * gets its own outcome, not the conflict, and still does not run.
 */
export async function conflictRejected(
  conn: Connection
): Promise<ConformanceCheck> {
  const key = newKey();
  const first = await charge(conn, 100, key);
  const before = await chargeCount(conn);
  const other = await charge(conn, 200, key);
  const ranOther = (await chargeCount(conn)) - before;
  const again = await charge(conn, 100, key);
  const ran = (await chargeCount(conn)) - before;
  const errors: string[] = [];
  const problem = rejectionProblem(other, 'idempotency_key_conflict', key);
  if (problem) errors.push(problem);
  if (ranOther !== 0)
    errors.push(
      `the tool MUST NOT run with the other arguments; it ran ${ranOther} times`
    );
  if (!sameOutcome(first, again)) {
    errors.push(
      `a rejection MUST leave the record as it was: the first request sent again after the conflict MUST get its outcome ${JSON.stringify(outcomeOf(first))}; got ${JSON.stringify(outcomeOf(again))}`
    );
  }
  if (ran !== ranOther)
    errors.push(
      `the first request sent again after the conflict MUST NOT run; it ran ${ran - ranOther} times`
    );
  return check(CONFLICT, errors, { ran });
}

/** A repeat while the first call runs is rejected at once, before the first finishes. */
export async function inProgressRejected(
  conn: Connection
): Promise<ConformanceCheck> {
  const key = newKey();
  const before = await chargeCount(conn);
  const started = Date.now();
  const original = charge(conn, 100, key, SLOW_SECONDS);
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const repeat = await charge(conn, 100, key, SLOW_SECONDS);
  const answeredAfterMs = Date.now() - started;
  const first = await original;
  // The rejection is not recorded: once the first call ends, its outcome is the key's.
  const after = await charge(conn, 100, key, SLOW_SECONDS);
  const ran = (await chargeCount(conn)) - before;
  const errors: string[] = [];
  const problem = rejectionProblem(repeat, 'idempotency_key_in_progress', key);
  if (problem) errors.push(problem);
  if (succeeded(first) && !sameOutcome(first, after)) {
    errors.push(
      `a rejection MUST leave the record as it was: a repeat after the first call ended MUST get its outcome ${JSON.stringify(outcomeOf(first))}; got ${JSON.stringify(outcomeOf(after))}`
    );
  }
  if (answeredAfterMs >= SLOW_SECONDS * 1000) {
    errors.push(
      `the repeat MUST be answered at once; it was answered ${answeredAfterMs} ms after the original started, which takes ${SLOW_SECONDS} s`
    );
  }
  if (!succeeded(first))
    errors.push(`the original failed: ${JSON.stringify(outcomeOf(first))}`);
  if (ran !== 1)
    errors.push(`the tool MUST run once for the key; it ran ${ran} times`);
  return check(IN_PROGRESS, errors, { ran, answeredAfterMs });
}

/** Values that are not keys are refused before the tool runs, and not echoed. */
export async function invalidKeyRejected(
  conn: Connection,
  maxKeyLength: number
): Promise<ConformanceCheck> {
  const tooLong = 'k'.repeat(maxKeyLength + 1);
  const marker = `not-a-key-${newKey()}`; // found in an answer only if echoed
  const values: Array<[string, unknown]> = [
    ['an empty string', ''],
    ['a number', 42],
    ['an object', { key: marker }],
    [`a string of ${tooLong.length} characters`, tooLong]
  ];
  const before = await chargeCount(conn);
  const errors: string[] = [];
  for (const [what, value] of values) {
    const answer = await charge(conn, 100, value);
    const problem = rejectionProblem(answer, 'invalid_idempotency_key');
    if (problem) errors.push(`${what}: ${problem}`);
    else if (
      answer.error &&
      [tooLong, marker].some((sent) =>
        JSON.stringify(answer.error).includes(sent)
      )
    ) {
      errors.push(`${what}: the rejection MUST NOT echo the value back`);
    }
  }
  const ran = (await chargeCount(conn)) - before;
  if (ran !== 0)
    errors.push(
      `the tool MUST NOT run for an invalid key; it ran ${ran} times`
    );
  return check(INVALID_KEY, errors, {
    ran,
    maxKeyLength
  });
}

/** A call without a key, or with a null key, runs every time, as it would without the extension. */
export async function noKeyRunsEveryTime(
  conn: Connection
): Promise<ConformanceCheck> {
  const before = await chargeCount(conn);
  const answers = [
    await charge(conn, 100),
    await charge(conn, 100),
    await charge(conn, 100, null),
    await charge(conn, 100, null)
  ];
  const ran = (await chargeCount(conn)) - before;
  const errors: string[] = [];
  if (!answers.every(succeeded)) {
    errors.push(
      `calls without a key or with a null key MUST run as without the extension; got ${JSON.stringify(answers.map(outcomeOf))}`
    );
  }
  if (ran !== answers.length)
    errors.push(
      `${answers.length} calls without a key (two absent, two null) MUST each run; the tool ran ${ran} times`
    );
  return check(NO_KEY, errors, { ran });
}

/**
 * The key is read in one place only, the tools/call request's _meta. An
 * invalid key value in another method's _meta is no key there, so the
 * method answers as usual; the key's member name inside `arguments` is an
 * argument like any other, so two such calls each run.
 */
export async function keyElsewhereIgnored(
  conn: Connection
): Promise<ConformanceCheck> {
  const errors: string[] = [];
  try {
    await conn.request('tools/list', {
      _meta: { [IDEMPOTENCY_KEY_META]: '' }
    });
  } catch (error) {
    if (!(error instanceof JsonRpcError)) throw error;
    errors.push(
      `tools/list with "" under _meta["${IDEMPOTENCY_KEY_META}"] MUST NOT be refused as a key; got ${error.code} with data ${JSON.stringify(error.data)}`
    );
  }
  const key = newKey();
  const args = { amount: 100, seconds: 0, [IDEMPOTENCY_KEY_META]: key };
  const before = await chargeCount(conn);
  const answers = [
    await callTool(conn, CHARGE_TOOL, args),
    await callTool(conn, CHARGE_TOOL, args)
  ];
  const ran = (await chargeCount(conn)) - before;
  if (!answers.every(succeeded) || ran !== answers.length) {
    errors.push(
      `two calls with the key's name as a member of arguments, and no key in _meta, MUST each run as calls without a key; the tool ran ${ran} times, answering ${JSON.stringify(answers.map(outcomeOf))}`
    );
  }
  return check(ELSEWHERE, errors, { ran });
}

/**
 * 2^53 + 1, then the same key with 2^53: a server that compares integers
 * exactly sees other arguments, a conflict; one that rounds both to the
 * same double would replay. A server whose parser cannot hold the first
 * MUST refuse it with -32602, which passes too.
 */
export async function integersComparedExactly(
  conn: Connection
): Promise<ConformanceCheck> {
  const key = newKey();
  const before = await chargeCount(conn);
  const first = await charge(conn, exactInteger(PAST_DOUBLE), key);
  const between = await chargeCount(conn);
  const rounded = await charge(conn, exactInteger(ROUNDED), key);
  const ran = (await chargeCount(conn)) - between;
  const refused = first.error?.code === INVALID_PARAMS;
  const errors: string[] = [];
  if (!refused && !first.result) {
    errors.push(
      `a keyed call with the integer ${PAST_DOUBLE} MUST run, or be refused with -32602; got ${JSON.stringify(outcomeOf(first))}`
    );
  } else if (!refused) {
    const problem = rejectionProblem(rounded, 'idempotency_key_conflict', key);
    if (problem)
      errors.push(
        `integers MUST compare exactly: the key with ${ROUNDED} after ${PAST_DOUBLE} is a conflict; ${problem}`
      );
    if (ran !== 0)
      errors.push(
        `the tool MUST NOT run with ${ROUNDED} under the key of ${PAST_DOUBLE}; it ran ${ran} times`
      );
  }
  return check(INTEGERS, errors, {
    refused,
    firstRan: between - before,
    ran
  });
}

/**
 * The count fixture is annotated read-only, and is deduplicated all the
 * same: a keyed read, a charge that changes the count, then the keyed read
 * again, which gets the count first answered.
 */
export async function readOnlyToolDeduplicated(
  conn: Connection
): Promise<ConformanceCheck> {
  const listed = (await conn.request('tools/list', {})) as {
    tools?: Array<{ name: string; annotations?: unknown }>;
  };
  const annotations = listed.tools?.find(
    (tool) => tool.name === COUNT_TOOL
  )?.annotations;
  const key = newKey();
  const first = await callTool(conn, COUNT_TOOL, {}, key);
  const between = await charge(conn, 100);
  const repeat = await callTool(conn, COUNT_TOOL, {}, key);
  const errors: string[] = [];
  if (!succeeded(first) || !succeeded(between)) {
    errors.push(
      `the keyed read or the charge failed: ${JSON.stringify([first, between].map(outcomeOf))}`
    );
  } else if (!sameOutcome(first, repeat)) {
    errors.push(
      `every tool that receives a key MUST be deduplicated, whatever its annotations: the repeat of the keyed ${COUNT_TOOL} MUST get the recorded ${JSON.stringify(outcomeOf(first))}; got ${JSON.stringify(outcomeOf(repeat))}`
    );
  }
  return check(READ_ONLY, errors, { annotations });
}

/**
 * A keyed call's outcome is recorded whichever it is: a call whose
 * arguments the tool's input schema refuses (a tool execution error), and a
 * call to a tool the server does not have (a JSON-RPC error). The key with a
 * valid charge after either is then a conflict, and the charge does not run.
 */
export async function failedOutcomeRecorded(
  conn: Connection
): Promise<ConformanceCheck> {
  const failures: Array<[string, string, Record<string, unknown>]> = [
    [
      'arguments the input schema refuses',
      CHARGE_TOOL,
      { amount: 'not an integer', seconds: 0 }
    ],
    ['an unknown tool', UNKNOWN_TOOL, { amount: 100, seconds: 0 }]
  ];
  const errors: string[] = [];
  const outcomes: Record<string, unknown> = {};
  let ran = 0;
  for (const [what, name, args] of failures) {
    const key = newKey();
    outcomes[what] = outcomeOf(await callTool(conn, name, args, key));
    const before = await chargeCount(conn);
    const valid = await charge(conn, 100, key);
    const ranValid = (await chargeCount(conn)) - before;
    ran += ranValid;
    const problem = rejectionProblem(valid, 'idempotency_key_conflict', key);
    if (problem)
      errors.push(
        `${what}: the outcome MUST be recorded, so the key with a valid charge is a conflict; ${problem}`
      );
    if (ranValid !== 0)
      errors.push(
        `${what}: the charge MUST NOT run under a key whose outcome was recorded; it ran ${ranValid} times`
      );
  }
  return check(FAILURE_RECORDED, errors, { ran, outcomes });
}

/**
 * The result of a keyed call names its key in _meta under the extension's
 * identifier, a tool execution error's too; the replay carries the same
 * member, since it was recorded with the result.
 */
export async function resultAcknowledged(
  conn: Connection
): Promise<ConformanceCheck> {
  const key = newKey();
  const first = await charge(conn, 100, key);
  const repeat = await charge(conn, 100, key);
  const failedKey = newKey();
  const failed = await charge(conn, 'not an integer', failedKey);
  const errors: string[] = [];
  if (!succeeded(first))
    errors.push(`the keyed charge failed: ${JSON.stringify(outcomeOf(first))}`);
  for (const problem of [
    acknowledgementProblem('the keyed charge', first, key),
    acknowledgementProblem(
      'a keyed charge the input schema refuses',
      failed,
      failedKey
    )
  ]) {
    if (problem) errors.push(problem);
  }
  if (
    JSON.stringify(acknowledgementOf(repeat)) !==
    JSON.stringify(acknowledgementOf(first))
  ) {
    errors.push(
      `a replay MUST carry the acknowledgement exactly as the first answer did, ${JSON.stringify(acknowledgementOf(first))}; got ${JSON.stringify(acknowledgementOf(repeat))}`
    );
  }
  return check(ACKNOWLEDGED, errors, {
    acknowledgement: acknowledgementOf(first),
    replayed: acknowledgementOf(repeat)
  });
}
