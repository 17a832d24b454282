# Data-mining flow sizes: the distribution measured by VL2 (Greenberg et al., "VL2: A Scalable
# and Flexible Data Center Network", SIGCOMM 2009, Fig. 2: flows of a data-mining cluster), in
# the form pFabric (Alizadeh et al., SIGCOMM 2013), PIAS and MQ-ECN simulate it:
# github.com/HKUST-SING/MQ-ECN-NS2, scripts/CDF_vl2.tcl (there: size in 1460-byte packets,
# cumulative fraction). Converted here to bytes (x 1460).
#
# Columns: flow size in bytes, cumulative fraction of flows at or below it. Sizes between two
# points are interpolated linearly. Half the flows are a single packet; the mean is about 7.5 MB
# and the largest flow about 973 MB (most of the bytes are in the few largest flows).
1460 0
1460 0.50
2920 0.60
4380 0.70
10220 0.80
389820 0.90
3076220 0.95
97333820 0.99
973333820 1.00
