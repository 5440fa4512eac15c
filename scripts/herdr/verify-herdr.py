#!/usr/bin/env python3
"""Start an isolated `herdr server`, ping it, check protocol 20, stop it."""
import json, os, socket, subprocess, sys, tempfile, time

BIN = sys.argv[1] if len(sys.argv) > 1 else "/tmp/herdr-bin/herdr"
root = tempfile.mkdtemp(prefix="hv", dir="/tmp")  # short: unix socket path limit
for d in ["home", "config", "state", "runtime", "data", "cache", "config/herdr"]:
    os.makedirs(os.path.join(root, d), exist_ok=True)
with open(os.path.join(root, "config/herdr/config.toml"), "w") as f:
    f.write("onboarding = false\n\n[update]\nversion_check = false\nmanifest_check = false\n")
sock = os.path.join(root, "herdr.sock")
env = {
    "PATH": os.environ.get("PATH", ""),
    "HOME": f"{root}/home", "XDG_CONFIG_HOME": f"{root}/config",
    "XDG_STATE_HOME": f"{root}/state", "XDG_RUNTIME_DIR": f"{root}/runtime",
    "XDG_DATA_HOME": f"{root}/data", "XDG_CACHE_HOME": f"{root}/cache",
    "HERDR_SOCKET_PATH": sock, "SHELL": "/bin/sh", "TERM": "xterm-256color",
}
log = open(os.path.join(root, "server.log"), "w")
proc = subprocess.Popen([BIN, "server"], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

def request(method, params=None, rid="1"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sock)
    s.sendall((json.dumps({"id": rid, "method": method, "params": params or {}}) + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return json.loads(buf)

ok = False
try:
    answer, last = None, None
    for _ in range(100):
        try:
            answer = request("ping")
            break
        except Exception as e:
            last = e
            time.sleep(0.1)
    print("ping answer:", json.dumps(answer) if answer else f"no answer ({last})")
    ok = bool(answer) and answer.get("result", {}).get("protocol") == 20
    try:
        print("server.stop answer:", json.dumps(request("server.stop", rid="2")))
    except Exception as e:
        print("server.stop:", e)
    try:
        proc.wait(timeout=10)
        print("server exited with", proc.returncode)
    except subprocess.TimeoutExpired:
        proc.kill(); proc.wait()
        print("server did not stop within 10 s; killed")
finally:
    if proc.poll() is None:
        proc.kill(); proc.wait()
print("server log:", root + "/server.log")
print("PROTOCOL 20 OK" if ok else "PROTOCOL CHECK FAILED")
sys.exit(0 if ok else 1)
