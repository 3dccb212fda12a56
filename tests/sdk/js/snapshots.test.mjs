// Snapshots as the JS SDK takes them (normal mode only): E2B's own cases (snapshot-api.test.ts:
// create, boot from one, two children that diverge, list unfiltered, by sandbox and by name,
// named snapshots, delete true then false, a directory and two files kept) and the source that
// runs on with its processes. Each test makes its own sandboxes and deletes its snapshots.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { test } from 'node:test'

import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'

import { normalOnly } from './helpers.mjs'

// What a test made, removed when it ends whatever happened: its sandboxes killed first (a
// snapshot is not deleted while sandboxes of it run), then its snapshots deleted.
function made(t) {
  const sandboxes = []
  const snapshots = []
  t.after(async () => {
    for (const id of sandboxes) await Sandbox.kill(id)
    for (const id of snapshots) await Sandbox.deleteSnapshot(id)
  })
  return {
    async create(template, opts) {
      const sbx = template === undefined ? await Sandbox.create(opts) : await Sandbox.create(template, opts)
      sandboxes.push(sbx.sandboxId)
      return sbx
    },
    async snapshot(sbx, opts) {
      const snapshot = await sbx.createSnapshot(opts)
      snapshots.push(snapshot.snapshotId)
      return snapshot
    },
    snapshots,
  }
}

async function listed(opts) {
  return (await Sandbox.listSnapshots(opts).nextItems()).map((s) => s.snapshotId)
}

test('a sandbox from a snapshot has its files; the source runs on', normalOnly, async (t) => {
  const m = made(t)
  const sbx = await m.create()
  const testContent = 'content from original sandbox'
  await sbx.files.write('/home/user/test.txt', testContent)
  const sleeper = await sbx.commands.run('sleep 3600', { background: true })
  const { endAt } = await sbx.getInfo()
  const snapshot = await m.snapshot(sbx)
  assert.ok(snapshot.snapshotId.length > 0)
  assert.deepEqual(snapshot.names, [])
  assert.equal(await sbx.isRunning(), true)
  assert.equal((await sbx.getInfo()).endAt.getTime(), endAt.getTime())
  assert.ok((await sbx.commands.list()).some((p) => p.pid === sleeper.pid))

  const child = await m.create(snapshot.snapshotId)
  assert.notEqual(child.sandboxId, sbx.sandboxId)
  assert.equal(await child.files.read('/home/user/test.txt'), testContent)
})

test('create multiple sandboxes from the same snapshot', normalOnly, async (t) => {
  const m = made(t)
  const sbx = await m.create()
  const testContent = 'shared snapshot content'
  await sbx.files.write('/home/user/shared.txt', testContent)
  const snapshot = await m.snapshot(sbx)
  const sandbox1 = await m.create(snapshot.snapshotId)
  const sandbox2 = await m.create(snapshot.snapshotId)
  assert.equal(await sandbox1.files.read('/home/user/shared.txt'), testContent)
  assert.equal(await sandbox2.files.read('/home/user/shared.txt'), testContent)
  await sandbox1.files.write('/home/user/shared.txt', 'modified in sandbox1')
  assert.equal(await sandbox1.files.read('/home/user/shared.txt'), 'modified in sandbox1')
  assert.equal(await sandbox2.files.read('/home/user/shared.txt'), testContent)
})

test('list snapshots: all, of a sandbox, by name, in pages', normalOnly, async (t) => {
  const m = made(t)
  const sbx = await m.create()
  const unnamed = await m.snapshot(sbx)
  const snapshotName = `snap-filter-${randomUUID().slice(0, 12)}`
  const named = await m.snapshot(sbx, { name: snapshotName })
  assert.equal(named.snapshotId, `${snapshotName}:default`)
  assert.ok(named.names.some((n) => n.includes(snapshotName)))

  const paginator = Sandbox.listSnapshots()
  assert.equal(paginator.hasNext, true)
  const all = (await paginator.nextItems()).map((s) => s.snapshotId)
  assert.ok(all.includes(unnamed.snapshotId) && all.includes(named.snapshotId))
  const mine = (await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId)
  assert.deepEqual(mine, [named.snapshotId, unnamed.snapshotId])
  assert.deepEqual(await listed({ name: snapshotName }), [named.snapshotId])
  assert.deepEqual(await listed({ name: `${snapshotName}-does-not-exist` }), [])

  const paged = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 1 })
  const first = await paged.nextItems()
  assert.equal(paged.hasNext, true)
  const second = await paged.nextItems()
  assert.equal(paged.hasNext, false)
  assert.deepEqual([...first, ...second].map((s) => s.snapshotId), mine)
})

test('delete snapshot: true, then false', normalOnly, async (t) => {
  const m = made(t)
  const snapshot = await (await m.create()).createSnapshot()
  assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), false)
})

test('a snapshot keeps a directory and its files', normalOnly, async (t) => {
  const m = made(t)
  const sbx = await m.create()
  const appDir = '/home/user/app'
  await sbx.files.makeDir(appDir)
  await sbx.files.write(`${appDir}/config.json`, '{"env": "test"}')
  await sbx.files.write(`${appDir}/data.txt`, 'important data')
  const snapshot = await Sandbox.createSnapshot(sbx.sandboxId)
  m.snapshots.push(snapshot.snapshotId)
  const child = await m.create(snapshot.snapshotId)
  assert.equal(await child.files.exists(appDir), true)
  assert.equal(await child.files.read(`${appDir}/config.json`), '{"env": "test"}')
  assert.equal(await child.files.read(`${appDir}/data.txt`), 'important data')
})

test('refusals: a bad name, a paused source', normalOnly, async (t) => {
  const m = made(t)
  const sbx = await m.create()
  await assert.rejects(sbx.createSnapshot({ name: 'a b' }), (e) =>
    e instanceof SandboxError && e.message.includes("Invalid name: alias 'a b'"))
  assert.equal(await sbx.pause(), true)
  await assert.rejects(sbx.createSnapshot(), SandboxNotFoundError)
})
