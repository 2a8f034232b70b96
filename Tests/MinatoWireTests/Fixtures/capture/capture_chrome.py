import http.server, subprocess, sys, threading
mode = sys.argv[1]
result = {}
done = threading.Event()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        result[self.path] = self.rfile.read(n).decode()
        self.send_response(200); self.send_header("Access-Control-Allow-Origin", "*"); self.end_headers()
        done.set()
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", 8765), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
p = subprocess.Popen(["chromium", "--headless=new", "--no-sandbox", "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream", "--allow-loopback-in-peer-connection",
    "--disable-features=WebRtcHideLocalIpsWithMdns", "--user-data-dir=/tmp/wire-chrome-profile",
    "file://" + __import__("os").path.abspath("page.html") + "#" + mode], stdout=subprocess.DEVNULL, stderr=open("chrome-%s.err" % mode, "w"))
ok = done.wait(45)
p.terminate(); p.wait(10)
for k, v in result.items():
    sys.stderr.write("path %s\n" % k)
    sys.stdout.write(v)
sys.exit(0 if ok and ("/" + mode) in result else 1)
