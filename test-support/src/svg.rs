//! Reading back what plotters draws.

/// The points of every `<polyline>` stroked `colour` (`#RRGGBB`, upper
/// case as plotters writes it) in `svg`, in whole pixels, in document order.
pub fn polylines(svg: &str, colour: &str) -> Vec<Vec<(i32, i32)>> {
    let stroke = format!("stroke=\"{colour}\"");
    svg.split("<polyline")
        .skip(1)
        .filter(|e| e.split('>').next().is_some_and(|tag| tag.contains(&stroke)))
        .map(|e| {
            let pts = e.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
            pts.split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_colours_lines_are_read_in_order() {
        let svg = r##"<svg><polyline fill="none" stroke="#FF0000" points="1,2 3,4 "/>
<polyline fill="none" stroke="#0000FF" points="5,6 "/><text fill="#FF0000">x</text>
<polyline stroke="#FF0000" points="7,8 9,10 11,12"/></svg>"##;
        assert_eq!(
            polylines(svg, "#FF0000"),
            [vec![(1, 2), (3, 4)], vec![(7, 8), (9, 10), (11, 12)]]
        );
        assert_eq!(polylines(svg, "#0000FF"), [vec![(5, 6)]]);
        assert!(polylines(svg, "#00FF00").is_empty());
    }
}
