// The control API as the JS SDK uses it (normal mode only): create, connect, kill, list, info,
// timeouts, pause and resume, the pause at a sandbox's end and its resume by traffic (autoResume),
// metrics, a sandbox killed while a command runs, and a quickstart.
// Each test makes its own sandboxes and kills them.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { test } from 'node:test'

import { Sandbox, SandboxNotFoundError, TimeoutError } from 'e2b'

import { normalOnly, waitUntil } from './helpers.mjs'

// Sandbox.create(opts), killed when the test ends whatever happened.
async function create(t, opts) {
  const sbx = await Sandbox.create(opts)
  t.after(() => Sandbox.kill(sbx.sandboxId))
  return sbx
}

async function listedIds(opts) {
  return (await Sandbox.list(opts).nextItems()).map((s) => s.sandboxId)
}

async function waitUntilAsync(predicate, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((done) => setTimeout(done, 200))
  }
}

test('quickstart: create, run, write and read, pause, connect, kill', normalOnly, async () => {
  const sbx = await Sandbox.create()
  try {
    assert.equal((await sbx.commands.run('echo hello from $(whoami)')).stdout, 'hello from user\n')
    await sbx.files.write('hello.txt', 'Hello, sandbox!')
    assert.equal(await sbx.files.read('hello.txt'), 'Hello, sandbox!')
    assert.equal(await sbx.pause(), true)
    assert.equal(await sbx.isRunning(), false)
    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await resumed.files.read('/home/user/hello.txt'), 'Hello, sandbox!')
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
})

test('create with metadata and envs; getInfo; a token is required', normalOnly, async (t) => {
  const metadata = { suite: 'lifecycle-js', tag: randomUUID(), 'odd key': 'a/b&c=d' }
  const sbx = await create(t, { metadata, envs: { GREETING: 'hi' }, timeoutMs: 120_000 })
  assert.equal((await sbx.commands.run('echo $GREETING')).stdout, 'hi\n')
  const info = await sbx.getInfo()
  assert.deepEqual([info.sandboxId, info.templateId, info.state], [sbx.sandboxId, 'base', 'running'])
  assert.deepEqual(info.metadata, metadata)
  assert.equal(info.endAt.getTime() - info.startedAt.getTime(), 120_000)
  assert.deepEqual(await listedIds({ query: { metadata } }), [sbx.sandboxId])

  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
  const url = `${process.env.E2B_SANDBOX_URL}/files?path=/etc/hostname`
  assert.equal((await fetch(url, { headers })).status, 401)
  assert.equal((await fetch(url, { headers: { ...headers, 'X-Access-Token': '0'.repeat(64) } })).status, 401)
  assert.ok(await sbx.files.read('/etc/hostname'))
})

test('connect extends only; kill ends the sandbox', normalOnly, async (t) => {
  const sbx = await create(t, { timeoutMs: 300_000 })
  const { endAt } = await sbx.getInfo()
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 })
  assert.equal((await again.commands.run('echo connected')).stdout, 'connected\n')
  assert.equal((await again.getInfo()).endAt.getTime(), endAt.getTime())
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 })
  assert.ok((await sbx.getInfo()).endAt > endAt)

  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(sbx.getInfo(), SandboxNotFoundError)
})

test('list: metadata, order, pages, startedAfter, template and state', normalOnly, async (t) => {
  const metadata = { tag: randomUUID() }
  const first = await create(t, { metadata })
  const second = await create(t, { metadata })
  const query = { metadata }
  assert.deepEqual(await listedIds({ query }), [second.sandboxId, first.sandboxId])
  assert.deepEqual(await listedIds({ query, order: 'asc' }), [first.sandboxId, second.sandboxId])

  const pages = Sandbox.list({ query, limit: 1 })
  assert.deepEqual((await pages.nextItems()).map((s) => s.sandboxId), [second.sandboxId])
  assert.equal(pages.hasNext, true)
  assert.deepEqual((await pages.nextItems()).map((s) => s.sandboxId), [first.sandboxId])
  assert.equal(pages.hasNext, false)

  const { startedAt } = await second.getInfo()
  assert.deepEqual(await listedIds({ query: { metadata, startedAfter: startedAt } }), [second.sandboxId])
  const later = new Date(startedAt.getTime() + 1000)
  assert.deepEqual(await listedIds({ query: { metadata, startedAfter: later } }), [])
  assert.equal((await listedIds({ query: { metadata, template: 'base' } })).length, 2)
  assert.deepEqual(await listedIds({ query: { metadata, template: 'unknown-template' } }), [])

  assert.equal(await first.pause(), true)
  assert.deepEqual(await listedIds({ query: { metadata, state: ['paused'] } }), [first.sandboxId])
  assert.deepEqual(await listedIds({ query: { metadata, state: ['running'] } }), [second.sandboxId])
})

test('setTimeout: the sandbox expires', normalOnly, async (t) => {
  const sbx = await create(t)
  await sbx.setTimeout(3000)
  const { endAt } = await sbx.getInfo()
  assert.ok(endAt.getTime() - Date.now() < 4000)
  await waitUntilAsync(async () => !(await sbx.isRunning()), 20_000)
  assert.ok(Date.now() >= endAt.getTime())
  await assert.rejects(sbx.getInfo(), SandboxNotFoundError)
})

test('pause, then connect resumes with files, processes and envs', normalOnly, async (t) => {
  const sbx = await create(t, { envs: { KEPT: 'yes' } })
  await sbx.files.write('note.txt', 'before the pause')
  const sleeper = await sbx.commands.run('sleep 600', { background: true })
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false) // already paused
  assert.equal(await sbx.isRunning(), false)
  assert.equal((await sbx.getInfo()).state, 'paused')

  await sbx.connect()
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.files.read('note.txt'), 'before the pause')
  assert.ok((await sbx.commands.list()).some((p) => p.pid === sleeper.pid))
  assert.equal((await sbx.commands.run('echo $KEPT')).stdout, 'yes\n')
})

// Shorten the sandbox's life to 1 s and wait until it reads paused (its pause may still run).
async function pausedAtItsEnd(sbx) {
  await sbx.setTimeout(1000)
  await waitUntilAsync(async () => (await sbx.getInfo()).state === 'paused', 120_000)
}

test('autoResume: a request through the proxy wakes a sandbox paused at its end', { ...normalOnly, timeout: 300_000 }, async (t) => {
  const lifecycle = { onTimeout: 'pause', autoResume: true }
  const sbx = await create(t, { lifecycle })
  assert.deepEqual((await sbx.getInfo()).lifecycle, lifecycle)
  const server = await sbx.commands.run('cd /tmp && python3 -m http.server 8000', { background: true })
  // The server runs on without its output stream: the pause's cut of the stream would have the
  // SDK probe /health, which resumes an autoResume sandbox.
  await server.disconnect()
  const url = `${process.env.E2B_SANDBOX_URL}/`
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' }
  const get = async () => (await fetch(url, { headers })).status
  await waitUntilAsync(async () => (await get()) === 200, 30_000)

  await pausedAtItsEnd(sbx)
  assert.equal(await get(), 200) // held while the sandbox resumes, then answered
  assert.equal((await sbx.getInfo()).state, 'running')
  await pausedAtItsEnd(sbx)
  assert.equal(await sbx.isRunning(), true) // envd's /health resumes it too
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal((await sbx.commands.run('echo awake')).stdout, 'awake\n')
})

test('getMetrics', normalOnly, async (t) => {
  const sbx = await create(t)
  const created = Date.now()
  let metrics = []
  await waitUntilAsync(async () => (metrics = await sbx.getMetrics()).length > 0, 30_000)
  const [first] = metrics
  assert.equal(first.cpuCount, 2)
  assert.ok(first.memUsed > 0 && first.memUsed < first.memTotal)
  assert.ok(first.diskUsed > 0 && first.diskUsed < first.diskTotal)
  assert.ok(Math.abs(first.timestamp.getTime() - created) < 30_000)
  const longAgo = new Date(created - 40 * 60_000)
  const range = { start: longAgo, end: new Date(longAgo.getTime() + 10 * 60_000) }
  assert.deepEqual(await sbx.getMetrics(range), [])
})

test('killed while a command streams: the SDK sees the sandbox gone', normalOnly, async (t) => {
  const sbx = await create(t)
  const ticks = []
  const handle = await sbx.commands.run('while true; do echo tick; sleep 0.1; done', {
    background: true,
    onStdout: (s) => ticks.push(s),
  })
  await waitUntil(() => ticks.length >= 3)
  await Sandbox.kill(sbx.sandboxId)
  await assert.rejects(handle.wait(), (e) => e instanceof TimeoutError && /killed or reached its end of life/.test(e.message))
  assert.equal(await sbx.isRunning(), false)
})
