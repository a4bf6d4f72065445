"""One scenario of scripts/gpu-host-check on the real PyTorch and the simulated GPU, run by CTest:

    host_check.py [gpu-host-check arguments...] SCENARIO

The simulated GPU has a PCI address but no sysfs node, so the setup checklist's scenarios get a
prepared sysfs tree (TRAINSHIM_SYSFS), as tests/integration/test_host_scenarios.cpp gives the
stand-in's: for `setup`, GPU 0 on a NUMA node holding every CPU this process may use; for `numa`,
GPU 0 on a node holding only the last of them, so that the check pins the job outside it. Every
scenario must run here: a skip fails (--strict).
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_list(cpus):
    return ",".join(str(cpu) for cpu in sorted(cpus))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def gpu0_bus_id():
    """GPU 0's PCI address as sysfs names it, as scripts/gpu-host-check's NUMA check reads it."""
    probe = ("import torch; p = torch.cuda.get_device_properties(0); "
             "print(f'{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0')")
    return subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.strip()


def sysfs_tree(root, node_cpus):
    allowed = os.sched_getaffinity(0)
    write(os.path.join(root, "bus/pci/devices", gpu0_bus_id(), "numa_node"), "1")
    write(os.path.join(root, "devices/system/node/node1/cpulist"), cpu_list(node_cpus))
    write(os.path.join(root, "devices/system/cpu/online"), cpu_list(allowed))
    return root


def main():
    scenario, rest = sys.argv[-1], sys.argv[1:-1]
    command = [sys.executable, os.path.join(ROOT, "scripts", "gpu-host-check"), "--strict", "--only", scenario,
               "--python", sys.executable, *rest]
    with tempfile.TemporaryDirectory(prefix="trainshim-realtorch-sysfs-") as scratch:
        env = dict(os.environ)
        allowed = sorted(os.sched_getaffinity(0))
        if scenario == "setup":
            env["TRAINSHIM_SYSFS"] = sysfs_tree(scratch, allowed)
        elif scenario == "numa":
            env["TRAINSHIM_SYSFS"] = sysfs_tree(scratch, allowed[-1:])
        return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
