// Pauses to disk as the JS SDK asks for them (normal mode only): `pause({ keepMemory: false })`,
// `connect({ onResume: 'reboot' })` on a full pause, and `lifecycle.onTimeout` with
// `keepMemory: false` at create. A boot from the files keeps the
// files and the access token and changes the boot id; the processes are gone.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { Sandbox } from 'e2b'

import { normalOnly } from './helpers.mjs'

const bootId = 'cat /proc/sys/kernel/random/boot_id'

async function create(t, opts) {
  const sbx = await Sandbox.create(opts)
  t.after(() => Sandbox.kill(sbx.sandboxId))
  return sbx
}

async function sleepers(sbx) {
  return (await sbx.commands.list()).filter((p) => p.cmd === 'sleep')
}

test('pause keepMemory false: files and token kept, a new boot', normalOnly, async (t) => {
  const sbx = await create(t, { envs: { KEPT: 'yes' } })
  await sbx.files.write('/home/user/marker', 'persisted')
  const before = (await sbx.commands.run(bootId)).stdout
  await sbx.commands.run('sleep 600', { background: true })

  assert.equal(await sbx.pause({ keepMemory: false }), true)
  assert.equal(await sbx.isRunning(), false)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await sbx.pause({ keepMemory: false }), false) // already paused

  const resumed = await Sandbox.connect(sbx.sandboxId)
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal(await sbx.files.read('/home/user/marker'), 'persisted') // the old handle's token
  assert.notEqual((await sbx.commands.run(bootId)).stdout, before)
  assert.equal((await sbx.commands.run('echo $KEPT')).stdout, 'yes\n')
  assert.deepEqual(await sleepers(sbx), [])
})

test("connect onResume 'reboot' boots a full pause from its files", normalOnly, async (t) => {
  const sbx = await create(t)
  await sbx.files.write('/home/user/marker', 'persisted')
  const before = (await sbx.commands.run(bootId)).stdout
  await sbx.commands.run('sleep 600', { background: true })

  assert.equal(await sbx.pause(), true)
  await sbx.connect({ onResume: 'reboot' })
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.files.read('/home/user/marker'), 'persisted')
  assert.notEqual((await sbx.commands.run(bootId)).stdout, before)
  assert.deepEqual(await sleepers(sbx), [])
})

test('lifecycle onTimeout pause keepMemory false: paused to disk at its end', normalOnly, async (t) => {
  const lifecycle = { onTimeout: { action: 'pause', keepMemory: false } }
  const sbx = await create(t, { lifecycle })
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
  await sbx.files.write('/home/user/marker', 'persisted')
  const before = (await sbx.commands.run(bootId)).stdout

  await sbx.setTimeout(1000)
  while ((await sbx.getInfo()).state !== 'paused') await new Promise((r) => setTimeout(r, 200))
  assert.equal(await sbx.isRunning(), false)
  await sbx.connect()
  assert.equal(await sbx.files.read('/home/user/marker'), 'persisted')
  assert.notEqual((await sbx.commands.run(bootId)).stdout, before)
})
