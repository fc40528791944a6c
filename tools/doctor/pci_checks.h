// lockstep-doctor's PCIe checks: is each GPU's link trained at full width and speed, do the
// bridges between the GPUs redirect peer-to-peer traffic (ACS), and does the IOMMU translate it?
// Each reads the sysfs tree under SystemPaths (fixture trees in tests) and never throws: what it
// cannot read becomes an N/A finding that says why. With no GPUs (host devices only) each check
// returns one N/A finding, "no GPU: not applicable".
#pragma once

#include <vector>

#include "tools/doctor/finding.h"
#include "tools/doctor/machine.h"
#include "tools/doctor/pci_sysfs.h"

namespace ls::doctor {

// Where the ACS and IOMMU fixes come from: NCCL's troubleshooting guide on ACS, which also says
// that IO virtualization (VT-d, the IOMMU) can redirect peer-to-peer traffic to the root complex.
inline constexpr const char* kNcclAcsGuide =
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
    "#pci-access-control-services-acs";

// check "pcie-link", one finding per GPU: OK at the maximum width and speed; WARN for a narrower
// link (reseat / slot / riser) or a slower one (often idle power saving: recheck under load).
Findings check_pcie_links(const SystemPaths& paths, const std::vector<GpuId>& gpus);

// check "acs", one finding per bridge above the GPUs (subject: its address): FAIL when a bridge
// on the peer-to-peer path between two GPUs has ReqRedir or CmpltRedir set, with the setpci /
// BIOS fix from NCCL's troubleshooting guide. Bridges whose config space is unreadable and that
// lspci cannot tell about either are gathered into one N/A finding ("run as root").
Findings check_acs(const SystemPaths& paths, const std::vector<GpuId>& gpus);

// check "iommu": one "host" finding (IOMMU on or off, the kernel command line's IOMMU flags) and,
// with the IOMMU on, one per GPU: OK in a passthrough (identity) domain, WARN in a translated
// one (DMA, DMA-FQ) with the iommu=pt fix.
Findings check_iommu(const SystemPaths& paths, const std::vector<GpuId>& gpus);

}  // namespace ls::doctor
