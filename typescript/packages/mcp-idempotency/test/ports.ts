// What the tests that start servers share.

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** A port no one listens on now, as tests/wire.py's free_port finds one. */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}
