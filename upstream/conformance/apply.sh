#!/bin/sh
# Lay this draft onto a checkout of modelcontextprotocol/conformance: copy its new files
# where they sit in that repository, and apply the patch that registers the scenario and
# serves its fixtures from the everything-server.
#     upstream/conformance/apply.sh /tmp/conformance-draft
set -eu
here=$(cd "$(dirname "$0")" && pwd)
target=${1:?usage: apply.sh CONFORMANCE_CHECKOUT}
cp "$here/src/scenarios/server/idempotency.ts" "$here/src/scenarios/server/idempotency-helpers.ts" \
    "$here/src/scenarios/server/idempotency-checks.ts" "$here/src/scenarios/server/idempotency.test.ts" \
    "$target/src/scenarios/server/"
cp "$here/src/seps/sep-3182.yaml" "$target/src/seps/"
cp "$here/examples/servers/typescript/idempotency-fixture.ts" \
    "$here/examples/servers/typescript/sep-3182-ignores-idempotency-key.ts" \
    "$target/examples/servers/typescript/"
(cd "$target" && patch -p1 --forward < "$here/patches/register-and-serve.patch")
