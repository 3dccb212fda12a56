// A fork through the JS SDK (normal mode only), as E2B's own fork.test.ts has it: a child with the
// parent's files and its own writes, both running; two children for 60 s; Sandbox.fork(id); a
// killed source, a paused one and a count below 1 refused by the server. Each test kills what it
// made.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'

import { normalOnly } from './helpers.mjs'

const STATE = '/home/user/state.txt'

// Sandbox.create(opts), killed when the test ends whatever happened.
async function create(t, opts) {
  const sbx = await Sandbox.create(opts)
  t.after(() => Sandbox.kill(sbx.sandboxId))
  return sbx
}

// The forks, each a Sandbox, killed when the test ends.
function children(t, forks) {
  const started = forks.filter((f) => f instanceof Sandbox)
  for (const f of started) t.after(() => f.kill())
  assert.deepEqual(started, forks)
  return started
}

test('fork: the child has the parent files, its writes are its own', normalOnly, async (t) => {
  const sbx = await create(t)
  await sbx.files.write(STATE, 'state before fork')
  const forks = await sbx.fork()
  assert.equal(forks.length, 1)
  const [fork] = children(t, forks)
  assert.notEqual(fork.sandboxId, sbx.sandboxId)
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await fork.isRunning(), true)
  assert.equal(await fork.files.read(STATE), 'state before fork')
  await fork.files.write(STATE, 'modified in fork')
  assert.equal(await sbx.files.read(STATE), 'state before fork')
})

test('fork: two children for 60 s, and Sandbox.fork(id)', normalOnly, async (t) => {
  const sbx = await create(t, { metadata: { suite: 'fork-js' } })
  const forks = children(t, await sbx.fork({ count: 2, timeoutMs: 60_000 }))
  const ids = new Set(forks.map((f) => f.sandboxId))
  assert.equal(ids.size, 2)
  assert.equal(ids.has(sbx.sandboxId), false)
  for (const fork of forks) {
    assert.equal(await fork.isRunning(), true)
    const info = await fork.getInfo()
    assert.deepEqual(info.metadata, { suite: 'fork-js' })
    assert.equal(info.endAt.getTime() - info.startedAt.getTime(), 60_000)
  }
  const [byId] = children(t, await Sandbox.fork(sbx.sandboxId))
  assert.equal((await byId.commands.run('echo forked')).stdout, 'forked\n')
})

test('fork: refused for a count below 1, a paused or a killed sandbox', normalOnly, async (t) => {
  const sbx = await create(t)
  const refused = (pattern) => (e) => e instanceof SandboxError && pattern.test(e.message)
  await assert.rejects(sbx.fork({ count: 0 }), refused(/Count must be at least 1/))
  assert.equal(await sbx.pause(), true)
  await assert.rejects(sbx.fork(), refused(/is paused and cannot be forked; resume it first/))
  await sbx.kill()
  await assert.rejects(sbx.fork(), SandboxNotFoundError)
})
