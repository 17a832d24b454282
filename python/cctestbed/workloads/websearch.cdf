# Web-search flow sizes: the distribution measured by DCTCP (Alizadeh et al., "Data Center TCP
# (DCTCP)", SIGCOMM 2010, Fig. 4: background and query flows of a production web-search cluster),
# in the form the HPCC simulations use (Li et al., "HPCC: High Precision Congestion Control",
# SIGCOMM 2019): github.com/alibaba-edu/High-Precision-Congestion-Control,
# traffic_gen/WebSearch_distribution.txt (there: size in bytes, cumulative percent).
# pFabric (SIGCOMM 2013) and PIAS use the same points in packets (CDF_search.tcl / CDF_dctcp.tcl).
#
# Columns: flow size in bytes, cumulative fraction of flows at or below it. Sizes between two
# points are interpolated linearly (as HPCC's custom_rand and ns-2's EmpiricalRandomVariable do).
# Mean about 1.7 MB; largest 30 MB.
0 0
10000 0.15
20000 0.20
30000 0.30
50000 0.40
80000 0.53
200000 0.60
1000000 0.70
2000000 0.80
5000000 0.90
10000000 0.97
30000000 1.00
