// A sandbox's way out through the unmodified JS SDK: default access reaches the fake internet
// (curl, and pip from its package index), `allowInternetAccess: false` and the `network` rules
// of `Sandbox.create` apply, `updateNetwork` replaces them on a running sandbox, and what is
// always denied stays denied under every rule set.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { ALL_TRAFFIC, CommandExitError, Sandbox, SandboxNotFoundError } from 'e2b'

import { addresses, connect, CONNECTED, create, curl, internet, pipInstall, REFUSED }
  from './probes.mjs'

test('default access reaches the internet and its package index', async (t) => {
  const sbx = await create(t)
  const echo = await curl(sbx, internet.http)
  assert.equal(echo.server, internet.http)
  assert.equal(echo.client, internet.uplink) // masqueraded: the internet never sees the pool
  assert.equal(await pipInstall(sbx, internet.index), internet.package.greeting)
})

test('allowInternetAccess: false', async (t) => {
  const sbx = await create(t, { allowInternetAccess: false })
  assert.equal(await connect(sbx, internet.http, 80), REFUSED)
  assert.equal(await connect(sbx, internet.index, 80), REFUSED)
  await assert.rejects(pipInstall(sbx, internet.index), CommandExitError)
})

test('an allowed address beats denying all traffic', async (t) => {
  // The SDK's own form: denyOut as a function of its selector context.
  const network = { allowOut: [internet.http], denyOut: ({ allTraffic }) => [allTraffic] }
  const sbx = await create(t, { network })
  assert.equal(await connect(sbx, internet.http, 80), CONNECTED)
  assert.equal(await connect(sbx, internet.other, 80), REFUSED)
  assert.equal((await curl(sbx, internet.http)).server, internet.http)
})

test('updateNetwork replaces the rules of a running sandbox', async (t) => {
  const sbx = await create(t, { network: { denyOut: [internet.other] } })
  assert.equal(await connect(sbx, internet.other, 80), REFUSED)
  assert.equal(await connect(sbx, internet.http, 80), CONNECTED)

  await sbx.updateNetwork({ allowInternetAccess: false })
  assert.equal(await connect(sbx, internet.http, 80), REFUSED)
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)

  // The static form, by ID, as another process would call it.
  await Sandbox.updateNetwork(sbx.sandboxId, { allowOut: [internet.http], denyOut: [ALL_TRAFFIC] })
  assert.equal(await connect(sbx, internet.http, 80), CONNECTED)
  assert.equal(await connect(sbx, internet.other, 80), REFUSED)

  await sbx.updateNetwork({}) // every field left out is cleared: default access again
  assert.equal(await connect(sbx, internet.other, 80), CONNECTED)

  await assert.rejects(Sandbox.updateNetwork('nosuchsandbox', {}), SandboxNotFoundError)
})

test('always denied under every rule set', async (t) => {
  // The metadata address, serve (its API port on the sandbox's gateway and on `uplink`'s
  // address) and another sandbox, even with rules naming them: at create and after updates.
  const [sbx, neighbour] = [await create(t), await create(t)]
  const { gateway } = await addresses(sbx)
  const { own: neighbourAddress } = await addresses(neighbour)
  const denied = [['169.254.169.254', 80], [gateway, internet.api_port],
    [internet.uplink, internet.api_port], [neighbourAddress, 49983]]
  const named = denied.map(([address]) => `${address}/32`)
  // Each rule set, and whether it lets the echo server through.
  const ruleSets = [
    [null, CONNECTED], // the create's: default access
    [{ allowOut: [ALL_TRAFFIC] }, CONNECTED],
    [{ allowOut: named, denyOut: [ALL_TRAFFIC] }, REFUSED],
    [{ allowOut: [...named, internet.http] }, CONNECTED],
    [{}, CONNECTED],
  ]
  for (const [rules, echo] of ruleSets) {
    if (rules !== null) await sbx.updateNetwork(rules)
    for (const [address, port] of denied) {
      assert.deepEqual([rules, address, await connect(sbx, address, port)], [rules, address, REFUSED])
    }
    assert.deepEqual([rules, await connect(sbx, internet.http, 80)], [rules, echo])
  }
  const allowing = await create(t, { network: { allowOut: named, denyOut: [ALL_TRAFFIC] } })
  for (const [address, port] of denied) assert.equal(await connect(allowing, address, port), REFUSED)
})
