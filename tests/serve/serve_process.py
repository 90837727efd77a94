"""What the Python tests of `accord serve` share: the checks they gather,
and a server process on a free loopback port. A script sets Server.accord
and Server.model (its default model) before it starts one."""
import os
import subprocess

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, flush=True)


class Server:
    """An `accord serve` process on a free loopback port."""

    accord = None
    model = None

    def __init__(self, *options, env=None, model=None, listen="127.0.0.1:0", stderr=None):
        command = [Server.accord, "serve", "--model", model or Server.model, "--listen", listen, "--log-level", "warn",
                   *options]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                        env={**os.environ, **(env or {})})
        line = self.process.stdout.readline()
        if "serving on http://" not in line:
            self.process.kill()
            raise RuntimeError("accord serve did not start: " + repr(line))
        self.address = line.split("http://", 1)[1].strip()
        self.url = "http://" + self.address

    def stop(self):
        self.process.terminate()
        code = self.process.wait(timeout=60)
        check(code == 0, f"accord serve exits 0 on SIGTERM, got {code}")
