// Volumes through the JS SDK's Volume class (normal mode only): create, list, connect, destroy,
// and the content methods against sandboxd's volume-content API, which the SDK finds through
// E2B_VOLUME_API_URL (scripts/test-sandboxd-sdk sets it). Each test destroys its volumes.
import assert from 'node:assert/strict'
import { randomBytes, randomUUID } from 'node:crypto'
import { test } from 'node:test'

import { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b'

import { normalOnly } from './helpers.mjs'

async function made(t, prefix) {
  assert.ok(process.env.E2B_VOLUME_API_URL, 'the SDK finds the content API only through it')
  const volume = await Volume.create(`${prefix}-${randomUUID().slice(0, 12)}`)
  t.after(() => Volume.destroy(volume.volumeId))
  return volume
}

test('create, list, getInfo, connect, destroy', normalOnly, async (t) => {
  const volume = await made(t, 'js')
  assert.ok(volume.token)
  const listed = (await Volume.list()).map((v) => [v.volumeId, v.name])
  assert.deepEqual(listed.filter(([id]) => id === volume.volumeId), [[volume.volumeId, volume.name]])
  assert.equal((await Volume.getInfo(volume.volumeId)).name, volume.name)
  const connected = await Volume.connect(volume.volumeId)
  await connected.writeFile('/from-connect.txt', 'connected')
  assert.equal(await volume.readFile('/from-connect.txt'), 'connected')
  await assert.rejects(Volume.create(volume.name), VolumeError)
  await assert.rejects(Volume.create('not a name'), /Invalid volume name/)
  assert.equal(await Volume.destroy(volume.volumeId), true)
  assert.equal(await Volume.destroy(volume.volumeId), false)
  await assert.rejects(Volume.getInfo(volume.volumeId), VolumeNotFoundError)
})

test('files: write, read in every format, refusals', normalOnly, async (t) => {
  const volume = await made(t, 'js-files')
  const written = await volume.writeFile('/notes/a.txt', 'hello', { force: true })
  assert.deepEqual([written.path, written.size, written.mode, written.uid, written.gid],
    ['/notes/a.txt', 5, 0o644, 1000, 1000])
  assert.equal(await volume.readFile('/notes/a.txt'), 'hello')
  await assert.rejects(volume.writeFile('/notes/a.txt', 'again'), VolumeError)
  await assert.rejects(volume.writeFile('/missing/b.txt', 'x'), VolumePathNotFoundError)
  await assert.rejects(volume.readFile('/nope'), VolumePathNotFoundError)

  const big = randomBytes(3 << 20)
  const stream = new ReadableStream({
    start(controller) {
      for (let i = 0; i < big.length; i += 65536) controller.enqueue(big.subarray(i, i + 65536))
      controller.close()
    },
  })
  const streamed = await volume.writeFile('/big.bin', stream, { mode: 0o600, uid: 0, gid: 0 })
  assert.deepEqual([streamed.size, streamed.mode, streamed.uid], [big.length, 0o600, 0])
  assert.ok(Buffer.from(await volume.readFile('/big.bin', { format: 'bytes' })).equals(big))
  const blob = await volume.readFile('/big.bin', { format: 'blob' })
  assert.equal(blob.size, big.length)
  const chunks = []
  for await (const chunk of await volume.readFile('/big.bin', { format: 'stream' })) chunks.push(chunk)
  assert.ok(Buffer.concat(chunks).equals(big))
})

test('dirs, list depth, metadata, remove', normalOnly, async (t) => {
  const volume = await made(t, 'js-dirs')
  const dir = await volume.makeDir('/d1', { mode: 0o750 })
  assert.deepEqual([dir.type, dir.mode], ['directory', 0o750])
  await assert.rejects(volume.makeDir('/d1'), VolumeError)
  await volume.makeDir('/d1/d2/d3', { force: true })
  await volume.writeFile('/d1/d2/f.txt', 'f')
  assert.deepEqual((await volume.list('/d1')).map((e) => e.name), ['d2'])
  assert.deepEqual((await volume.list('/d1', { depth: 3 })).map((e) => e.path),
    ['/d1/d2', '/d1/d2/d3', '/d1/d2/f.txt'])
  const updated = await volume.updateMetadata('/d1/d2/f.txt', { uid: 1001, mode: 0o600 })
  assert.deepEqual([updated.uid, updated.gid, updated.mode], [1001, 1000, 0o600])
  assert.equal(await volume.exists('/d1/d2/f.txt'), true)
  await volume.remove('/d1')
  assert.equal(await volume.exists('/d1'), false)
  await assert.rejects(volume.remove('/d1'), VolumePathNotFoundError)
})

test('a volume mounted in two sandboxes at once, and read after them', normalOnly, async (t) => {
  const volume = await made(t, 'js-mounts')
  await volume.writeFile('/from-outside.txt', 'outside')
  const a = await Sandbox.create({ volumeMounts: { '/mnt/data': volume } })
  t.after(() => Sandbox.kill(a.sandboxId))
  const b = await Sandbox.create({ volumeMounts: { '/home/user/data': volume.name } })
  t.after(() => Sandbox.kill(b.sandboxId))
  assert.deepEqual((await a.getInfo()).volumeMounts, [{ name: volume.name, path: '/mnt/data' }])

  assert.equal(await a.files.read('/mnt/data/from-outside.txt'), 'outside')
  await a.files.write('/mnt/data/from-a.txt', 'written in a')
  assert.equal(await b.files.read('/home/user/data/from-a.txt'), 'written in a')
  const owner = await b.commands.run('stat -c %U:%G /home/user/data/from-a.txt', { user: 'root' })
  assert.equal(owner.stdout, 'user:user\n')

  await Sandbox.kill(a.sandboxId)
  await Sandbox.kill(b.sandboxId)
  assert.equal(await volume.readFile('/from-a.txt'), 'written in a')
})
