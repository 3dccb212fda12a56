// E2B's code interpreter as E2B builds it, through the unmodified JS SDK: from an image without
// systemd (the build's provisioning installs it from the fake internet's Debian repository), a
// pip install from the fake index, a server run by a systemd unit that the start command starts
// with `systemctl start`, a ready check on its port. Its sandboxes boot systemd as PID 1, answer
// on the port through the proxy, and systemd restarts the server when it dies.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { Template, waitForPort } from 'e2b'

import { built, create, facts, pipInstall, run, throughProxy, unique } from './builds.mjs'

const PORT = 49999 // the code interpreter's
const SERVER = `import http.server
import fake_internet_hello


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = fake_internet_hello.GREETING.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("", ${PORT}), Hello).serve_forever()
`
const UNIT = `[Service]
ExecStart=/opt/venv/bin/python /opt/server.py
Restart=always
RestartSec=100ms
`
const MAIN_PID = 'sudo systemctl show -P MainPID server'
const quoted = (text) => `'${text.replaceAll("'", "'\\''")}'`

// Poll `check` until it holds; the bound only fails a broken server instead of hanging.
async function eventually(check, what, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`)
    await sleep(100)
  }
}

test('a server started by systemctl serves, and systemd restarts it', async (t) => {
  const template = Template().fromImage(facts.images['no-systemd'])
    .runCmd(pipInstall('/opt/venv'), { user: 'root' })
    .runCmd(`printf %s ${quoted(SERVER)} > /opt/server.py`, { user: 'root' })
    .runCmd(`printf %s ${quoted(UNIT)} > /etc/systemd/system/server.service`, { user: 'root' })
    .setStartCmd('sudo systemctl start server', waitForPort(PORT))
  const name = built(t, unique('code-interpreter'))
  await Template.build(template, name)
  const sbx = await create(t, name)
  assert.equal(await run(sbx, 'cat /proc/1/comm'), 'systemd')
  const answer = await throughProxy(sbx, PORT)
  assert.equal(answer.status, 200)
  assert.equal(answer.body, facts.package.greeting)
  const before = await run(sbx, MAIN_PID)
  await run(sbx, `sudo kill -9 ${before}`)
  await eventually(async () => !['0', before].includes(await run(sbx, MAIN_PID)),
    'systemd to restart the server')
  await eventually(async () => (await throughProxy(sbx, PORT)).body === facts.package.greeting,
    'the restarted server to answer')
})
