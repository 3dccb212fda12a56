// Sandbox.files through the real JS SDK: uploads, downloads, filesystem RPCs and watchers.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { FileNotFoundError, FileType, FilesystemEventType, InvalidArgumentError, NotFoundError } from 'e2b'

import { sandbox, sh, waitUntil, workdir } from './helpers.mjs'

const BINARY = new Uint8Array(256 * 64 + 3).map((_, i) => i % 256)

async function streamBytes(stream) {
  const chunks = []
  for await (const chunk of stream) chunks.push(chunk)
  return Buffer.concat(chunks)
}

test('write and read text', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  const info = await sbx.files.write(`${dir}/hello.txt`, 'héllo wörld\n')
  assert.deepEqual([info.name, info.path, info.type], ['hello.txt', `${dir}/hello.txt`, FileType.FILE])
  assert.equal(await sbx.files.read(`${dir}/hello.txt`), 'héllo wörld\n')
})

test('write and read bytes, blob and stream', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  await sbx.files.write(`${dir}/a.bin`, BINARY.buffer)
  await sbx.files.write(`${dir}/b.bin`, new Blob([BINARY]))
  await sbx.files.write(`${dir}/c.bin`, new Blob([BINARY, BINARY]).stream())

  assert.deepEqual(await sbx.files.read(`${dir}/a.bin`, { format: 'bytes' }), BINARY)
  const blob = await sbx.files.read(`${dir}/b.bin`, { format: 'blob' })
  assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), BINARY)
  const streamed = await streamBytes(await sbx.files.read(`${dir}/c.bin`, { format: 'stream' }))
  assert.deepEqual(new Uint8Array(streamed), new Uint8Array([...BINARY, ...BINARY]))
})

test('large file streams both ways', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  const block = new Uint8Array(1 << 20).map((_, i) => (i * 7) % 251)
  await sbx.files.write(`${dir}/big.bin`, new Blob(Array(24).fill(block)).stream())
  let size = 0
  for await (const chunk of await sbx.files.read(`${dir}/big.bin`, { format: 'stream' })) size += chunk.length
  assert.equal(size, 24 << 20)
  assert.equal(await sh(sbx, `stat -c %s ${dir}/big.bin`), `${24 << 20}\n`)
})

test('write several files at once, creating parents', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  const infos = await sbx.files.write([
    { path: `${dir}/one.txt`, data: 'first' },
    { path: `${dir}/deep/er/two.txt`, data: 'second' },
    { path: `${dir}/deep/three.bin`, data: new Blob([new Uint8Array([0, 1, 2])]) },
  ])
  assert.deepEqual(infos.map((i) => i.path).sort(), [
    `${dir}/deep/er/two.txt`,
    `${dir}/deep/three.bin`,
    `${dir}/one.txt`,
  ])
  assert.equal(await sbx.files.read(`${dir}/deep/er/two.txt`), 'second')
  assert.deepEqual(await sbx.files.read(`${dir}/deep/three.bin`, { format: 'bytes' }), new Uint8Array([0, 1, 2]))
})

test('gzip upload and gzip download', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  const text = 'compress me '.repeat(5000)
  await sbx.files.write(`${dir}/z.txt`, text, { gzip: true })
  assert.equal(await sh(sbx, `stat -c %s ${dir}/z.txt`), `${text.length}\n`) // stored decompressed
  assert.equal(await sbx.files.read(`${dir}/z.txt`, { gzip: true }), text)
})

test('exists, getInfo, makeDir', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  await sbx.files.write(`${dir}/f.txt`, '12345', { user: 'user' })
  assert.equal(await sbx.files.exists(`${dir}/f.txt`), true)
  assert.equal(await sbx.files.exists(`${dir}/missing`), false)

  const info = await sbx.files.getInfo(`${dir}/f.txt`)
  assert.deepEqual(
    [info.name, info.type, info.size, info.owner, info.group, info.permissions],
    ['f.txt', FileType.FILE, 5, 'user', 'user', '-rw-r--r--'],
  )
  assert.ok(Math.abs(info.modifiedTime.getTime() - Date.now()) < 60000)

  assert.equal(await sbx.files.makeDir(`${dir}/a/b`), true)
  assert.equal(await sbx.files.makeDir(`${dir}/a/b`), false)
  const dirInfo = await sbx.files.getInfo(`${dir}/a/b`)
  assert.deepEqual([dirInfo.type, dirInfo.permissions], [FileType.DIR, 'drwxr-xr-x'])
})

test('list with depth', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  for (const rel of ['file1.txt', 'subdir1/subdir1_1/a.txt', 'subdir1/subdir1_2/b.txt', 'subdir2/c.txt']) {
    await sbx.files.write(`${dir}/${rel}`, rel)
  }
  const depth1 = await sbx.files.list(dir)
  assert.deepEqual(depth1.map((e) => e.name), ['file1.txt', 'subdir1', 'subdir2'])
  const depth2 = await sbx.files.list(dir, { depth: 2 })
  assert.deepEqual(
    depth2.map((e) => e.path.slice(dir.length + 1)),
    ['file1.txt', 'subdir1', 'subdir1/subdir1_1', 'subdir1/subdir1_2', 'subdir2', 'subdir2/c.txt'],
  )
})

test('symlinks: described by their target, the link kept in symlinkTarget', async (t) => {
  // This SDK (2.51) does not read EntryInfo.isSymlink, which envd now sends: a link shows its
  // target's type, as before the field existed; list() leaves out a dangling link (no type).
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  await sbx.files.write(`${dir}/file.txt`, 'x')
  await sbx.files.makeDir(`${dir}/dir`)
  await sh(sbx, `cd ${dir} && ln -s file.txt to-file && ln -s dir to-dir && ln -s nowhere dangling`)
  const listed = Object.fromEntries(
    (await sbx.files.list(dir)).map((e) => [e.name, [e.type, e.symlinkTarget]]),
  )
  assert.deepEqual(listed, {
    dir: [FileType.DIR, undefined],
    'file.txt': [FileType.FILE, undefined],
    'to-dir': [FileType.DIR, `${dir}/dir`],
    'to-file': [FileType.FILE, `${dir}/file.txt`],
  })
  const info = await sbx.files.getInfo(`${dir}/to-file`)
  assert.deepEqual([info.type, info.symlinkTarget], [FileType.FILE, `${dir}/file.txt`])
  const dangling = await sbx.files.getInfo(`${dir}/dangling`)
  assert.deepEqual([dangling.type, dangling.symlinkTarget], [undefined, `${dir}/dangling`])
})

test('rename and remove', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  await sbx.files.write(`${dir}/old.txt`, 'content')
  const moved = await sbx.files.rename(`${dir}/old.txt`, `${dir}/moved/new.txt`)
  assert.deepEqual([moved.name, moved.path], ['new.txt', `${dir}/moved/new.txt`])
  assert.equal(await sbx.files.read(`${dir}/moved/new.txt`), 'content')
  await sbx.files.remove(`${dir}/moved`)
  await sbx.files.remove(`${dir}/never-existed`) // a missing path is not an error
  assert.equal(await sh(sbx, `ls -A ${dir}`), '')
})

test('metadata round trip', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  const info = await sbx.files.write(`${dir}/m.txt`, 'x', { metadata: { owner: 'alice' } })
  assert.deepEqual(info.metadata, { owner: 'alice' })
  assert.deepEqual((await sbx.files.getInfo(`${dir}/m.txt`)).metadata, { owner: 'alice' })
})

test('missing paths raise NotFoundError', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  await assert.rejects(sbx.files.read(`${dir}/nope`), FileNotFoundError)
  await assert.rejects(sbx.files.getInfo(`${dir}/nope`), NotFoundError)
  await assert.rejects(sbx.files.list(`${dir}/nope`), NotFoundError)
  await assert.rejects(sbx.files.rename(`${dir}/nope`, `${dir}/other`), NotFoundError)
  await assert.rejects(sbx.files.watchDir(`${dir}/nope`, () => {}), NotFoundError)
})

test('directory calls on a file are InvalidArgumentError', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  await sbx.files.write(`${dir}/plain.txt`, 'x')
  await assert.rejects(sbx.files.list(`${dir}/plain.txt`), InvalidArgumentError)
  await assert.rejects(sbx.files.watchDir(`${dir}/plain.txt`, () => {}), InvalidArgumentError)
  await assert.rejects(sbx.files.makeDir(`${dir}/plain.txt`), InvalidArgumentError)
})

test('watchDir reports create, write, chmod, rename and remove', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => events.push([e.type, e.name]))
  try {
    await sbx.files.write(`${dir}/w.txt`, 'data')
    await waitUntil(() => events.length >= 3)
    assert.deepEqual(events[0], [FilesystemEventType.CREATE, 'w.txt'])
    assert.deepEqual(new Set(events.map((e) => e[0])), new Set(['create', 'chmod', 'write']))

    events.length = 0
    await sh(sbx, `chmod 600 ${dir}/w.txt`)
    await sbx.files.rename(`${dir}/w.txt`, `${dir}/r.txt`)
    await sbx.files.remove(`${dir}/r.txt`)
    await waitUntil(() => events.length >= 4)
    assert.deepEqual(events, [
      [FilesystemEventType.CHMOD, 'w.txt'],
      [FilesystemEventType.RENAME, 'w.txt'],
      [FilesystemEventType.CREATE, 'r.txt'],
      [FilesystemEventType.REMOVE, 'r.txt'],
    ])
  } finally {
    await handle.stop()
  }
})

test('watchDir with and without recursion', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  await sh(sbx, `mkdir ${dir}/nested`)
  const flat = []
  const deep = []
  const flatHandle = await sbx.files.watchDir(dir, (e) => flat.push(e))
  const deepHandle = await sbx.files.watchDir(dir, (e) => deep.push(e), { recursive: true, includeEntry: true })
  try {
    await sbx.files.write(`${dir}/nested/file`, 'x')
    await waitUntil(() => deep.some((e) => e.name === 'nested/file' && e.type === FilesystemEventType.WRITE))
    assert.deepEqual([deep[0].type, deep[0].name], [FilesystemEventType.CREATE, 'nested/file'])
    assert.equal(deep[0].entry?.path, `${dir}/nested/file`)
    assert.ok(flat.every((e) => e.name === 'nested'), JSON.stringify(flat))
  } finally {
    await flatHandle.stop()
    await deepHandle.stop()
  }
})
