#!/usr/bin/env python3
"""A BMC made of pyghmi's IPMI server, for nodefence's interoperability tests.

pyghmi (https://opendev.org/x/pyghmi, PyPI "pyghmi") implements the BMC side of IPMI
v2.0 / RMCP+ independently of nodefence. This script subclasses pyghmi.ipmi.bmc.Bmc
with an in-memory power state and serves one user on a UDP port of the loopback
interface.

Usage:
    PYGHMI_BMC_PASSWORD=... pyghmi_bmc.py --user NAME [--port 0] [--address 127.0.0.1]
        [--power on|off] [--guid UUID]

The password comes from the environment, never the command line. Standard output, one
line each, flushed:
    ready PORT              listening (PORT is the bound port; --port 0 picks a free one)
    request NETFN CMD SEQ DATA  an IPMI request inside a session (hex; SEQ is the
                            rqSeq, the same for resends of one request)
    power on|off            the power state changed (after a chassis control)
    control NAME            a chassis control that does not change the state (cycle, reset)
The process exits when its standard input closes (so it never outlives the test).
"""

import argparse
import os
import sys
import threading
import uuid

import pyghmi.ipmi.bmc as bmc


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class TestBmc(bmc.Bmc):
    def __init__(self, authdata, port, address, guid, power):
        super().__init__(authdata, port=port, address=address, bmcuuid=guid)
        # With port 0 the kernel picked one; pyghmi routes session packets by it.
        self.port = self.serversocket.getsockname()[1]
        self.power = power

    def get_power_state(self):
        return self.power

    def set_power(self, state):
        self.power = state
        say("power " + state)

    def power_off(self):
        self.set_power("off")

    def power_on(self):
        self.set_power("on")

    def power_cycle(self):
        say("control cycle")
        self.set_power("on")

    def power_reset(self):
        say("control reset")

    def power_shutdown(self):
        self.set_power("off")

    def get_system_guid(self):
        return self.uuid

    def handle_raw_request(self, request, session):
        say("request %02x %02x %02x %s" % (request["netfn"], request["command"],
                                            session.seqlun,
                                            bytes(request["data"]).hex()))
        return super().handle_raw_request(request, session)


def exit_on_stdin_eof():
    sys.stdin.read()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--power", choices=("on", "off"), default="on")
    parser.add_argument("--guid", default=None)
    args = parser.parse_args()
    password = os.environ.get("PYGHMI_BMC_PASSWORD")
    if password is None:
        sys.exit("PYGHMI_BMC_PASSWORD is not set")
    guid = uuid.UUID(args.guid) if args.guid else None
    server = TestBmc({args.user: password}, args.port, args.address, guid, args.power)
    threading.Thread(target=exit_on_stdin_eof, daemon=True).start()
    say("ready %d" % server.port)
    server.listen(timeout=30)


if __name__ == "__main__":
    main()
