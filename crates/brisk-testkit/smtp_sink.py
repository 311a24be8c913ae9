"""An SMTP server for the tests (aiosmtpd): stores every message it accepts as a file, and
refuses some recipients on purpose.

    smtp_sink.py --port P --dir D [--starttls CERT KEY] [--smtps CERT KEY]

Each accepted message becomes D/N.eml (written to a temporary name, then renamed): a line
`X-Sink-Tls: yes|no` (whether the session was encrypted), a line `X-Sink-Rcpt: a, b`, then the
message as received. Recipients starting with `refuse` get 550, those starting with `busy` get
451. With --starttls the server offers STARTTLS and requires it before MAIL; with --smtps it
speaks TLS from the first byte. Prints `ready` once it listens.
"""

import argparse
import asyncio
import itertools
import os
import ssl

from aiosmtpd.smtp import SMTP


class Sink:
    def __init__(self, directory):
        self.directory = directory
        # Numbers go on from the messages kept before a restart.
        kept = [int(n[:-4]) for n in os.listdir(directory) if n.endswith(".eml")]
        self.numbers = itertools.count(max(kept, default=0) + 1)

    async def handle_RCPT(self, server, session, envelope, address, options):
        if address.startswith("refuse"):
            return "550 5.1.1 mailbox refused by the test sink"
        if address.startswith("busy"):
            return "451 4.3.0 the test sink is busy, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        n = next(self.numbers)
        # STARTTLS sets session.ssl; SMTPS is TLS from the start, on the transport.
        encrypted = session.ssl is not None or server.transport.get_extra_info("ssl_object")
        tls = "yes" if encrypted else "no"
        head = f"X-Sink-Tls: {tls}\r\nX-Sink-Rcpt: {', '.join(envelope.rcpt_tos)}\r\n"
        path = os.path.join(self.directory, f"{n}.eml")
        with open(path + ".tmp", "wb") as f:
            f.write(head.encode() + envelope.original_content)
        os.rename(path + ".tmp", path)
        return f"250 2.0.0 stored as {n}"


def context(cert, key):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--starttls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--smtps", nargs=2, metavar=("CERT", "KEY"))
    args = parser.parse_args()
    sink = Sink(args.dir)
    starttls = context(*args.starttls) if args.starttls else None

    def session():
        return SMTP(sink, tls_context=starttls, require_starttls=starttls is not None)

    smtps = context(*args.smtps) if args.smtps else None
    loop = asyncio.get_running_loop()
    server = await loop.create_server(session, "127.0.0.1", args.port, ssl=smtps)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
