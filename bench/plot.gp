# Shared gnuplot settings for the plots of bench/run. Before loading this file the harness sets
#   term   the PNG terminal this gnuplot has ("pngcairo" or "png")
#   out    the PNG to write          csv    the benchmark's CSV (header line: column names)
#   nps    the rank counts run, as words ("2 4")          name   the benchmark
# and a benchmark may set width and height (pixels) first.
if (!exists("width")) width = 1200
if (!exists("height")) height = 450
set terminal @term size width,height
# Titles are column and function names: an underscore is not a subscript.
set termoption noenhanced
set output out
set datafile separator ","
set grid
set key top left
set style data linespoints

# The rank counts, one by one: do for [i = 1:np_count] { n = np_at(i); ... }
np_count = words(nps)
np_at(i) = word(nps, i) + 0

# Column c of the rows run at n ranks, NaN (no point, and a break in the line) elsewhere.
on(n, c) = column("np") == n ? column(c) : NaN

# A message-size axis: powers of two, labelled 4kiB, 1MiB, ...
bytes_axis = 'set logscale x 2; set format x "%.0b%BB"; set xtics rotate by 35 right; ' . \
             'set xlabel "message size"'
