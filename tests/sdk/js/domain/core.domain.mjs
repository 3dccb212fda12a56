// The unmodified JS SDK with E2B_DOMAIN only (run by tests/network/test_sdk_domain.py inside the
// fake internet's `uplink`): the control API at https://api.DOMAIN, envd at
// https://49983-{id}.DOMAIN, and a server in the sandbox at https://{getHost(port)}, each a name
// node resolves and a certificate it verifies (NODE_EXTRA_CA_CERTS).
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { Sandbox } from 'e2b'

if (!process.env.E2B_DOMAIN || !process.env.NODE_EXTRA_CA_CERTS) {
  throw new Error('run by tests/network/test_sdk_domain.py, inside the fake internet')
}
if (process.env.E2B_API_URL || process.env.E2B_SANDBOX_URL) {
  throw new Error('domain mode: E2B_DOMAIN alone, without E2B_API_URL or E2B_SANDBOX_URL')
}

const PORT = 8000

// The response once the sandbox's server listens (502 until then).
async function answered(url) {
  const deadline = Date.now() + 30_000
  for (;;) {
    const answer = await fetch(url)
    if (answer.status === 200) return answer
    if (Date.now() > deadline) throw new Error(`${url}: ${answer.status}`)
    await new Promise((done) => setTimeout(done, 50))
  }
}

test('commands, files and a port by getHost', async (t) => {
  const sbx = await Sandbox.create()
  t.after(() => Sandbox.kill(sbx.sandboxId))
  assert.equal((await sbx.commands.run('echo hello from $(whoami)')).stdout, 'hello from user\n')
  await sbx.files.write('/home/user/hello.txt', 'Hello, sandbox!')
  assert.equal(await sbx.files.read('/home/user/hello.txt'), 'Hello, sandbox!')
  const listed = await Sandbox.list().nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId))

  const host = sbx.getHost(PORT)
  assert.equal(host, `${PORT}-${sbx.sandboxId}.${process.env.E2B_DOMAIN}`)
  const server = await sbx.commands.run(`python3 -m http.server ${PORT} --directory /home/user`, {
    background: true,
  })
  try {
    const answer = await answered(`https://${host}/hello.txt`)
    assert.equal(await answer.text(), 'Hello, sandbox!')
  } finally {
    await server.kill()
  }
  await sbx.kill()
  assert.ok(!(await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId))
})
